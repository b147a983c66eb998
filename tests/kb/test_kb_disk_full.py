"""A knowledge base on a really full disk: a small tmpfs mounted in a private mount namespace (``unshare -rm``, no
root needed where user namespaces are allowed), filled to a few KB free, then real `ctxrag` processes.

Before: with the disk full, `ingest`, `kb check` and `kb optimize` said "the document store is damaged (disk I/O
error) ... delete the knowledge base folder" (SQLite reports a shared-memory or log file that cannot grow as
SQLITE_IOERR, not SQLITE_FULL), "a SQLite database is damaged or busy", or died with FAISS's raw
``RuntimeError: ... write error``. Following that advice would have lost a knowledge base that was intact."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_kb_concurrency import _env
from ctxrag.testing.llm_server import HANG_GUARD_S

pytestmark = pytest.mark.slow  # a dozen real processes

FREE_KB = (8, 48, 512)
"""Free space left for each round: too little for SQLite's shared-memory file, for its log, for a FAISS segment."""

_DRIVER = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path

    mnt, docs, more, free_kbs = Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)]).returncode:
        print(json.dumps({"skip": "cannot mount a tmpfs in a private mount namespace"}))
        sys.exit(0)
    env = dict(os.environ, CTXRAG_HOME=str(mnt / "home"))
    cli = [sys.executable, "-m", "ctxrag.cli.main"]

    def run(*args):
        r = subprocess.run(cli + list(args), env=env, capture_output=True, text=True)
        return {"rc": r.returncode, "out": r.stdout + r.stderr}

    def fill(free_kb):
        st = os.statvfs(mnt)
        with open(mnt / "fill", "wb") as f:
            f.write(bytes(max(0, st.f_bavail * st.f_frsize - free_kb * 1024)))

    print(json.dumps({"seed": run("ingest", docs, "--kb", "k")}), flush=True)
    for free_kb in free_kbs:
        fill(free_kb)
        full = {name: run(*args.split()) for name, args in (("ingest", f"ingest {more} --kb k"),
                                                            ("kb check", "kb check k"), ("kb optimize", "kb optimize k"))}
        (mnt / "fill").unlink()
        print(json.dumps({"free_kb": free_kb, "full": full, "check after": run("kb", "check", "k"),
                          "docs after": run("doc", "list", "--kb", "k", "--json")}), flush=True)
    from ctxrag.stores.base import IndexedChunk
    from ctxrag.stores.vectors.dense import FaissIndex
    import numpy as np
    index = FaissIndex(dim=256)
    vectors = np.random.default_rng(0).random((2000, 256), dtype=np.float32)
    index.add([IndexedChunk(f"c{i}", "d", "t", "t", vector=v) for i, v in enumerate(vectors)])
    fill(64)
    try:
        index.save(mnt / "faiss")
        print(json.dumps({"faiss": "saved"}))
    except BaseException as e:
        from ctxrag.errors import is_disk_full
        print(json.dumps({"faiss": type(e).__name__, "disk_full": is_disk_full(e)}))
""")


def _docs(root: Path, stem: str, n: int, words: int) -> Path:
    root.mkdir()
    for i in range(n):
        (root / f"{stem}{i}.md").write_text(f"# {stem} {i}\n\n" + f"{stem}{i} tomato pepper " * words, encoding="utf-8")
    return root


def test_a_full_disk_says_so_keeps_everything_and_the_command_works_after_freeing_space(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no `unshare` to make a private mount namespace for a small tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = {**_env(tmp_path / "unused", "fake"), "CTXRAG_EMBEDDINGS__DIMENSIONS": "1024"}  # vectors that need room
    docs, more = _docs(tmp_path / "docs", "seed", 20, 200), _docs(tmp_path / "more", "more", 20, 300)
    r = subprocess.run(["unshare", "-rm", sys.executable, "-c", _DRIVER, str(mnt), str(docs), str(more),
                        json.dumps(FREE_KB)],
                       env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    if r.returncode and "unshare" in r.stderr and "Operation not permitted" in r.stderr:
        pytest.skip(f"user namespaces are not allowed here: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    if rows and "skip" in rows[0]:
        pytest.skip(rows[0]["skip"])
    assert rows[0]["seed"]["rc"] == 0, rows[0]
    rounds = [row for row in rows if "free_kb" in row]
    assert [row["free_kb"] for row in rounds] == list(FREE_KB), rows
    failures = 0
    for row in rounds:
        for name, got in row["full"].items():
            out = got["out"]
            assert "Traceback" not in out and "delete" not in out and "damaged" not in out, (row["free_kb"], name, out)
            if got["rc"] != 0:
                failures += 1
                line = out.strip().splitlines()[-1]
                assert line.startswith("error: ") and "the disk is full" in line and "othing was lost" in line \
                    and "free some space" in line, (row["free_kb"], name, out)
        assert row["check after"]["rc"] == 0, (row["free_kb"], row["check after"])
        assert len(json.loads(row["docs after"]["out"])) in (20, 40), row["docs after"]  # before or after the ingest
    assert failures >= len(FREE_KB), rounds  # the disk really was full: at least the ingest failed every round
    assert rows[-1] == {"faiss": "OSError", "disk_full": True}, rows[-1]
