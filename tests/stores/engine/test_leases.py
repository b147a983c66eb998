"""Reader leases (`ctxrag.stores.engine.leases`): a lease keeps its generation and segments through clean-up, dies
with its object or its process (kill -9 included), and a retired generation takes no new lease. Real files, real
flock, a real second process."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import filelock
import pytest

from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.bm25 import BM25ChunkIndex
from ctxrag.stores.bm25.segmented import SegmentedKeywordIndex
from ctxrag.stores.engine.generations import GenerationStore
from ctxrag.stores.engine import leases as leases_module
from ctxrag.stores.engine.leases import READERS_DIR, ReaderLeases
from ctxrag.stores.engine.segments import MergePolicy, referenced_segments
from ctxrag.testing.llm_server import HANG_GUARD_S


class _Holder:
    """Stands for an index object read from a generation."""


def test_a_lease_is_seen_until_released_and_a_retired_generation_takes_none(tmp_path: Path) -> None:
    leases = ReaderLeases(tmp_path)
    lease = leases.take(3, exists=lambda: True)
    assert lease is not None and lease.path is not None and lease.path.exists()
    assert leases.live([3]) == {}  # only retired generations are probed
    leases.retire([3])
    assert leases.live([3]) == {3: 1}
    assert leases.take(3, exists=lambda: True) is None  # retired: read the newer one
    assert leases.take(4, exists=lambda: False) is None  # gone
    lease.release()
    assert leases.live([3]) == {} and not lease.path.exists()
    leases.forget([])
    assert list((tmp_path / READERS_DIR).iterdir()) == []


def test_a_lease_lives_as_long_as_an_object_bound_to_it(tmp_path: Path) -> None:
    leases = ReaderLeases(tmp_path)
    leases.retire([1])
    a, b = _Holder(), _Holder()
    lease = leases.take(1, exists=lambda: True)
    assert lease is None  # retired before the take
    leases.forget([])
    lease = leases.take(1, exists=lambda: True)
    assert lease is not None
    lease.bind([a, b, 42])  # 42 cannot be tracked and holds nothing
    leases.retire([1])
    del a
    gc.collect()
    assert leases.live([1]) == {1: 1}
    del b
    gc.collect()
    assert leases.live([1]) == {} and lease.released


def test_no_object_to_bind_releases_at_once(tmp_path: Path) -> None:
    lease = ReaderLeases(tmp_path).take(2, exists=lambda: True)
    assert lease is not None
    lease.bind([])
    assert lease.released


def test_a_deleted_knowledge_base_folder_is_not_created_again_by_a_reader(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ReaderLeases(tmp_path / "gone").take(1, exists=lambda: True)
    assert not (tmp_path / "gone").exists()



def _rename_before_lock(monkeypatch: pytest.MonkeyPatch, root: Path, trash: Path) -> None:
    """Run `kb delete`'s rename between the reader's ``mkdir`` of its readers folder and its lock (the window in
    which filelock's acquire creates the missing folders again)."""
    real = leases_module._lock

    def lock_after_rename(path: Path) -> filelock.FileLock:
        if root.exists():
            os.replace(root, trash)
        return real(path)

    monkeypatch.setattr(leases_module, "_lock", lock_after_rename)


def test_a_kb_deleted_between_mkdir_and_lock_leaves_no_folder_behind(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root, trash = tmp_path / "kb" / "shared", tmp_path / "kb" / ".deleted-shared"
    (root / "indexes" / "gen-000001").mkdir(parents=True)
    (root / "kb.sqlite").write_text("x")
    _rename_before_lock(monkeypatch, root, trash)
    assert ReaderLeases(root).take(1, exists=(root / "indexes" / "gen-000001").is_dir) is None
    assert not root.exists(), sorted(str(p) for p in root.rglob("*"))
    assert (trash / "kb.sqlite").exists()  # the deleted folder itself is untouched (kb delete removes it)


def test_a_failed_take_never_removes_a_live_kb_folder_or_its_marks(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    (root / "kb.sqlite").write_text("x")
    leases = ReaderLeases(root)
    assert leases.take(5, exists=lambda: False) is None  # generation gone, knowledge base alive
    assert (root / "kb.sqlite").exists()
    leases.retire([2])
    assert leases.take(2, exists=lambda: True) is None
    assert leases.retired(2)


_LEASE_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ctxrag.stores.engine.leases import ReaderLeases
    lease = ReaderLeases(Path(sys.argv[1])).take(int(sys.argv[2]), exists=lambda: True)
    Path(sys.argv[1], "held").write_text("x")
    time.sleep(600)
""")


def _lease_in_another_process(root: Path, gen: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _LEASE_HOLDER, str(root), str(gen)])
    deadline = time.monotonic() + HANG_GUARD_S  # a guard against a hang, not a timing assertion
    while not (root / "held").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    (root / "held").unlink()
    return proc


def test_a_lease_of_a_killed_process_is_dead_and_its_file_removed(tmp_path: Path) -> None:
    leases = ReaderLeases(tmp_path)
    proc = _lease_in_another_process(tmp_path, 5)
    try:
        leases.retire([5])
        assert leases.live([5]) == {5: 1}
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=HANG_GUARD_S)
    assert leases.live([5]) == {}
    assert not [p for p in (tmp_path / READERS_DIR).iterdir() if p.suffix == ".lease"]


def _chunks(prefix: str, n: int) -> list[IndexedChunk]:
    rng = np.random.default_rng(len(prefix) + n)
    words = "amber copper frost ember glacier harbor lantern meteor".split()
    return [IndexedChunk(f"{prefix}{i}:0", f"{prefix}{i}", t, t) for i in range(n)
            for t in [" ".join(rng.choice(words, size=5))]]


def _segments_of(gens: GenerationStore, gen: int) -> set[str]:
    return referenced_segments(gens.gen_dir(gen) / "bm25")


def test_clean_up_keeps_a_leased_generation_and_its_segments_until_the_lease_goes(tmp_path: Path) -> None:
    gens = GenerationStore(tmp_path, "t")
    index = SegmentedKeywordIndex("bm25", lambda: BM25ChunkIndex("english"), lambda d: BM25ChunkIndex.load(d),
                                  policy=MergePolicy(merge_factor=2, min_size=1))
    with gens.write_lock():
        index.add(_chunks("a", 3))
        gens.write(1, {"bm25": index})
        gens.clean(1)
    lease = gens.lease(1)
    assert lease is not None
    pinned = _segments_of(gens, 1)
    for gen in range(2, 6):  # merges at every second segment drop generation 1's segment from the newest lists
        index.add(_chunks(f"g{gen}-", 2))
        with gens.write_lock():
            gens.write(gen, {"bm25": index})
            gens.clean(gen)
    assert gens.committed() == [1, 4, 5]  # 2 and 3 went; 1 is leased
    assert pinned <= set(os.listdir(gens.segments_dir))
    assert not pinned & (_segments_of(gens, 4) | _segments_of(gens, 5))  # kept for the reader alone
    lease.release()
    with gens.write_lock():
        gens.clean(5)
    assert gens.committed() == [4, 5]
    assert set(os.listdir(gens.segments_dir)) == _segments_of(gens, 4) | _segments_of(gens, 5)
    assert sorted(p.name for p in (tmp_path / READERS_DIR).iterdir()) == []  # no lease, no stale retire mark


def test_clean_up_keeps_a_generation_leased_by_another_process_until_it_is_killed(tmp_path: Path) -> None:
    gens = GenerationStore(tmp_path, "t")
    index = SegmentedKeywordIndex("bm25", lambda: BM25ChunkIndex("english"), lambda d: BM25ChunkIndex.load(d))
    for gen in (1, 2):
        index.add(_chunks(f"g{gen}-", 2))
        with gens.write_lock():
            gens.write(gen, {"bm25": index})
    proc = _lease_in_another_process(tmp_path, 1)
    try:
        with gens.write_lock():
            index.merge_all()
            gens.write(3, {"bm25": index})
            gens.clean(3)
        assert gens.committed() == [1, 2, 3]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=HANG_GUARD_S)
    with gens.write_lock():
        gens.clean(3)
    assert gens.committed() == [2, 3]
    assert set(os.listdir(gens.segments_dir)) == _segments_of(gens, 2) | _segments_of(gens, 3)
