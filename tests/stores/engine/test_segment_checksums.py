"""Segment checksums: the verified marker lets an open stat instead of hash; full verification and merges hash."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ctxrag.stores.engine.segment_checksums as segment_checksums
from ctxrag.errors import IndexCorruptError
from ctxrag.stores.engine.generations import GenerationStore
from ctxrag.stores.engine.segment_checksums import VERIFIED_FILE, full_verification
from ctxrag.stores.engine.segments import SET_FILE, SegmentedIndex
from test_segments import _bm25, _chunk, _dense, _text  # the same small indexes and chunks


def _count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    hashed: list[Path] = []
    real = segment_checksums.file_sha256

    def counting(path: Path) -> str:
        hashed.append(Path(path))
        return real(path)

    monkeypatch.setattr(segment_checksums, "file_sha256", counting)
    return hashed


def test_open_trusts_the_verified_marker_and_hashes_only_what_it_cannot_vouch_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(8)
    gens = GenerationStore(tmp_path, "t")
    indexes: dict[str, SegmentedIndex] = {"bm25": _bm25(), "dense": _dense()}
    for index in indexes.values():
        index.add([_chunk(f"d{i}:0", _text(rng), rng) for i in range(12)])
    with gens.write_lock():
        gens.write(1, indexes)
    seg_dirs = [i.sealed[0].directory for i in indexes.values()]
    assert all((d / VERIFIED_FILE).exists() for d in seg_dirs)  # written at publish
    hashed = _count_hashes(monkeypatch)
    segment_checksums._verified.clear()  # a new process
    assert len(_bm25().load_set(gens.gen_dir(1) / "bm25")) == 12
    assert len(_dense().load_set(gens.gen_dir(1) / "dense")) == 12
    assert hashed == []  # a stat per file, no read
    # no marker (a segment written before markers, or a read-only copy): hashed once, then remembered on disk
    (seg_dirs[0] / VERIFIED_FILE).unlink()
    segment_checksums._verified.clear()
    _bm25().load_set(gens.gen_dir(1) / "bm25")
    listed = json.loads((gens.gen_dir(1) / "bm25" / SET_FILE).read_text(encoding="utf-8"))["segments"][0]["files"]
    assert sorted(p.name for p in hashed) == sorted(listed) and (seg_dirs[0] / VERIFIED_FILE).exists()
    hashed.clear()
    segment_checksums._verified.clear()
    _bm25().load_set(gens.gen_dir(1) / "bm25")
    assert hashed == []
    # a copy of the folder (new inodes) is hashed again; `full_verification` (kb check / repair) always hashes
    with full_verification():
        _bm25().load_set(gens.gen_dir(1) / "bm25")
    assert len(hashed) == len(listed)


def test_damage_the_marker_cannot_see_is_found_by_full_verification_and_never_merged(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    gens = GenerationStore(tmp_path, "t")
    index = _dense()
    index.add([_chunk(f"d{i}:0", _text(rng), rng) for i in range(20)])
    with gens.write_lock():
        gens.write(1, {"dense": index})
    seg = index.sealed[0].directory
    target = seg / "index.faiss"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the stored vectors: the file still loads
    target.write_bytes(bytes(data))
    # bit rot leaves size and times alone: forge the marker to match the damaged file, as rot would
    marker = json.loads((seg / VERIFIED_FILE).read_text(encoding="utf-8"))
    marker["files"]["index.faiss"] = segment_checksums.stamp(target, marker["files"]["index.faiss"]["sha256"])
    (seg / VERIFIED_FILE).write_text(json.dumps(marker), encoding="utf-8")
    segment_checksums._verified.clear()
    opened = _dense().load_set(gens.gen_dir(1) / "dense")  # the open trusts the marker (the documented limit)
    assert opened is not None and len(opened) == 20
    with pytest.raises(IndexCorruptError, match="index.faiss"), full_verification():  # kb check / kb repair
        _dense().load_set(gens.gen_dir(1) / "dense")
    # a merge hashes every file of what it merges: the damage is not sealed into a new segment with new checksums
    opened.add([_chunk("new:0", _text(rng), rng)])
    opened.merge_all()
    with gens.write_lock(), pytest.raises(IndexCorruptError, match="index.faiss"):
        gens.write(2, {"dense": opened})
    assert 2 not in gens.committed()
