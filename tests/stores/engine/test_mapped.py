"""`ctxrag.stores.engine.mapped`: the huge-page advice on the memory maps of loaded FAISS and BM25 files (Linux), read
back from the kernel's own view of this process's maps (``/proc/self/smaps``: the ``hg`` flag)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.vectors.dense import FaissIndex
from ctxrag.stores.engine.mapped import advise_huge_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/smaps: Linux")


def _flags(path: Path) -> list[set[str]]:
    """VmFlags of each map of `path` in this process."""
    target, out, current = os.path.realpath(path), [], False
    with open("/proc/self/smaps", encoding="utf-8") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                current = len(head) >= 6 and line.split(maxsplit=5)[5].strip() == target
            elif current and line.startswith("VmFlags:"):
                out.append(set(line.split()[1:]))
    return out


@pytest.fixture
def can_advise(tmp_path: Path) -> None:
    probe = tmp_path / "probe.bin"
    np.zeros(1 << 16, dtype=np.uint8).tofile(probe)
    mapped = np.memmap(probe, mode="r")
    if not advise_huge_pages(probe):
        pytest.skip("this kernel refuses MADV_HUGEPAGE")
    del mapped


def test_loaded_faiss_and_bm25_files_are_advised_huge_pages(tmp_path: Path, can_advise: None) -> None:
    rng = np.random.default_rng(0)
    dense = FaissIndex()
    dense.add([IndexedChunk(f"c{i}", "d", "", "", vector=v) for i, v in enumerate(rng.standard_normal((50, 8)))])
    dense.save(tmp_path / "dense")
    loaded = FaissIndex.load(tmp_path / "dense")
    maps = _flags(tmp_path / "dense" / "index.faiss")
    assert maps and all("hg" in flags for flags in maps)
    assert loaded.search(np.ones(8, dtype=np.float32), 3) == dense.search(np.ones(8, dtype=np.float32), 3)

    bm25 = BM25Index("english")
    bm25.add(["alpha beta", "beta gamma", "gamma delta alpha"], ids=["a", "b", "c"])
    bm25.save(tmp_path / "bm25")
    loaded_bm25 = BM25Index.load(tmp_path / "bm25")
    maps = _flags(tmp_path / "bm25" / "bm25.npz")
    assert maps and all("hg" in flags for flags in maps)
    assert loaded_bm25.search("alpha") == bm25.search("alpha")


def test_a_file_without_maps_advises_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"x" * 4096)
    assert advise_huge_pages(plain) == 0
    assert advise_huge_pages(tmp_path / "missing.bin") == 0
