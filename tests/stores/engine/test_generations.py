"""GenerationStore: atomic generation writes with a checksummed manifest, verification, clean-up rules, and the
inter-process write lock (held by a real second process)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxrag.errors import IndexCorruptError, KnowledgeBaseLocked
from ctxrag.stores.engine.generations import GenerationStore


class _Files:
    """A stand-in index that writes the given files (the store only calls `save`)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def save(self, directory: Path) -> None:
        for name, data in self.files.items():
            (directory / name).write_bytes(data)


def test_write_records_size_and_checksum_and_verify_catches_damage(tmp_path: Path) -> None:
    gens = GenerationStore(tmp_path, "demo")
    with gens.write_lock():
        d = gens.write(1, {"dense": _Files({"index.faiss": b"x" * 100, "ids.json": b"{}"})})
    assert d == tmp_path / "indexes" / "gen-000001" and not list((tmp_path / "indexes").glob(".tmp-*"))
    manifest = gens.manifest(1)
    assert manifest is not None and manifest["indexes"]["dense"]["files"]["index.faiss"]["size"] == 100
    assert gens.verify(1, "dense", manifest) is True
    assert gens.verify(1, "graph", manifest) is False  # not listed: a kind enabled later, rebuilt by the caller
    target = d / "dense" / "index.faiss"
    target.write_bytes(b"y" * 100)  # same size, different bytes
    with pytest.raises(IndexCorruptError, match=r"index\.faiss.*checksum.*kb repair demo"):
        gens.verify(1, "dense", manifest)
    target.write_bytes(b"x" * 50)
    with pytest.raises(IndexCorruptError, match=r"index\.faiss.*50 bytes"):
        gens.verify(1, "dense", manifest)
    target.unlink()
    with pytest.raises(IndexCorruptError, match=r"index\.faiss.*missing"):
        gens.verify(1, "dense", manifest)


def test_manifest_damage_and_missing_generation_are_named(tmp_path: Path) -> None:
    gens = GenerationStore(tmp_path, "demo")
    with gens.write_lock():
        gens.write(1, {"bm25": _Files({"bm25.json": b"{}"})})
    (gens.gen_dir(1) / "manifest.json").write_text("{trunc", encoding="utf-8")
    with pytest.raises(IndexCorruptError, match="manifest.json"):
        gens.manifest(1)
    with pytest.raises(IndexCorruptError, match="gen-000007.*missing"):
        gens.manifest(7)


def test_writing_and_cleaning_need_the_lock(tmp_path: Path) -> None:
    gens = GenerationStore(tmp_path, "demo")
    with pytest.raises(RuntimeError, match="write lock"):
        gens.write(1, {})
    with pytest.raises(RuntimeError, match="write lock"):
        gens.clean(1)


def test_clean_keeps_current_and_previous_only(tmp_path: Path) -> None:
    gens = GenerationStore(tmp_path, "demo")
    with gens.write_lock():
        for n in (1, 2, 3, 4, 5):
            gens.write(n, {"bm25": _Files({"a": b"1"})})
        (tmp_path / "indexes" / ".tmp-gen-000006-1-abc").mkdir()  # a writer that died mid-write
        removed = gens.clean(3)  # 4 and 5 were never committed, 1 is too old, 2 may still be loading somewhere
    assert sorted(p.name for p in removed) == [".tmp-gen-000006-1-abc", "gen-000001", "gen-000004", "gen-000005"]
    assert gens.committed() == [2, 3]


_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ctxrag.stores.engine.generations import GenerationStore
    gens = GenerationStore(Path(sys.argv[1]), "demo")
    with gens.write_lock():
        Path(sys.argv[1], "held").write_text("x")
        time.sleep(float(sys.argv[2]))
""")


def _hold_lock(root: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(root), str(seconds)])
    deadline = time.monotonic() + 60
    while not (root / "held").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the lock holder did not start"
        time.sleep(0.05)
    return proc


def test_timeout_names_the_holder_and_a_waiting_writer_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    proc = _hold_lock(tmp_path, 30)
    try:
        gens = GenerationStore(tmp_path, "demo", lock_timeout=2)
        holder = json.loads((tmp_path / "write.lock.holder").read_text(encoding="utf-8"))
        assert holder["pid"] == proc.pid
        with caplog.at_level(logging.WARNING, logger="ctxrag.stores.engine.generations"):
            with pytest.raises(KnowledgeBaseLocked, match=rf"locked for writing by pid {proc.pid} on .*waited 2 s"):
                with gens.write_lock():
                    pass
        assert any("waiting for the write lock" in r.getMessage() and str(proc.pid) in r.getMessage()
                   for r in caplog.records)
    finally:
        proc.kill()
        proc.wait()


def test_a_waiting_writer_gets_the_lock_when_the_holder_finishes(tmp_path: Path) -> None:
    proc = _hold_lock(tmp_path, 2)
    gens = GenerationStore(tmp_path, "demo", lock_timeout=60)
    start = time.monotonic()
    with gens.write_lock():
        assert proc.poll() is not None or time.monotonic() - start > 0.5
        assert json.loads((tmp_path / "write.lock.holder").read_text(encoding="utf-8"))["pid"] == os.getpid()
    proc.wait(timeout=30)
    assert proc.returncode == 0
