"""FaissIndex: exact flat and HNSW kinds on real FAISS. The HNSW kind builds, saves with `faiss.write_index`, loads and
answers (recall against brute-force numpy on clustered vectors), with filters (id selectors, exact for small allowed
sets), incremental add, replace and delete (tombstones, then compaction); `auto` switches at the threshold; a
knowledge base picks the kind from its settings and keeps it across reopen."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ctxrag.errors import IndexCorruptError
from ctxrag.settings import DenseIndexSettings
from ctxrag.stores.vectors import dense as dense_mod
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.vectors.dense import FaissIndex
from ctxrag.stores.engine.id_map import ID_MAP_FILE

DIM = 32


def _clustered(n: int, seed: int = 0, clusters: int = 20) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM)).astype(np.float32)
    x = centres[rng.integers(0, clusters, n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _chunks(vecs: np.ndarray, prefix: str = "d") -> list[IndexedChunk]:
    return [IndexedChunk(f"{prefix}{i}:0", f"{prefix}{i}", "t", "t", vector=v) for i, v in enumerate(vecs)]


def _exact(vecs: np.ndarray, ids: list[str], q: np.ndarray, k: int) -> list[str]:
    scores = vecs @ q
    return [ids[i] for i in np.argsort(-scores, kind="stable")[:k]]


HNSW = DenseIndexSettings(kind="hnsw", hnsw_m=16, hnsw_ef_construction=64, hnsw_ef_search=256)


@pytest.fixture
def data() -> tuple[np.ndarray, list[IndexedChunk]]:
    vecs = _clustered(3000)
    return vecs, _chunks(vecs)


def test_settings_default_is_auto_with_a_threshold() -> None:
    s = DenseIndexSettings()
    assert s.kind == "auto" and s.hnsw_threshold > 0
    with pytest.raises(ValueError):
        DenseIndexSettings(kind="ivf")
    with pytest.raises(ValueError, match="unknown dense index kind"):
        FaissIndex(dim=4).rebuild("ivf")


def test_hnsw_builds_and_answers_close_to_exact(data) -> None:  # noqa: ANN001
    vecs, chunks = data
    idx = FaissIndex(config=HNSW)
    idx.add(chunks)
    assert idx.kind == "hnsw" and len(idx) == 3000
    assert type(faiss_inner(idx)).__name__ == "IndexHNSWFlat"
    ids = [c.chunk_id for c in chunks]
    queries = _clustered(50, seed=1)
    recall = np.mean([len(set(_exact(vecs, ids, q, 10)) & {c for c, _ in idx.search(q, 10)}) / 10 for q in queries])
    assert recall >= 0.9
    hits = idx.search(vecs[7], 3)
    assert hits[0][0] == ids[7] and hits[0][1] == pytest.approx(1.0, abs=1e-4)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def faiss_inner(idx: FaissIndex):  # noqa: ANN201
    import faiss

    return faiss.downcast_index(idx._index.index)


def test_hnsw_save_load_roundtrip(data, tmp_path: Path) -> None:  # noqa: ANN001
    vecs, chunks = data
    idx = FaissIndex(config=HNSW)
    idx.add(chunks)
    idx.delete(["d5:0"])
    idx.save(tmp_path / "g")
    meta = json.loads((tmp_path / "g" / dense_mod.IDS_FILE).read_text())
    assert meta["kind"] == "hnsw" and len(meta["dead"]) == 1
    again = FaissIndex.load(tmp_path / "g", HNSW)
    assert again.kind == "hnsw" and len(again) == 2999 and "d5:0" not in again
    for q in _clustered(10, seed=2):
        assert again.search(q, 10) == idx.search(q, 10)
    assert np.allclose(again.vectors(["d9:0"])[0], vecs[9], atol=1e-6)
    # a flat setting does not change a saved HNSW index
    assert FaissIndex.load(tmp_path / "g", DenseIndexSettings(kind="flat")).kind == "hnsw"


def test_hnsw_load_rejects_a_mismatched_id_map(data, tmp_path: Path) -> None:  # noqa: ANN001
    _, chunks = data
    idx = FaissIndex(config=HNSW)
    idx.add(chunks[:100])
    idx.save(tmp_path / "g")
    meta = json.loads((tmp_path / "g" / dense_mod.IDS_FILE).read_text())
    meta["dead"] = [1]
    (tmp_path / "g" / dense_mod.IDS_FILE).write_text(json.dumps(meta))
    with pytest.raises(IndexCorruptError, match="tombstones"):
        FaissIndex.load(tmp_path / "g")


@pytest.mark.parametrize("n_allowed", [5, 200, 2500])
def test_hnsw_filters_return_only_allowed_and_match_exact(data, n_allowed: int, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    vecs, chunks = data
    monkeypatch.setattr(dense_mod, "EXACT_FILTER_LIMIT", 100)  # 200 and 2500 go through the HNSW id selector
    idx = FaissIndex(config=HNSW)
    idx.add(chunks)
    rng = np.random.default_rng(3)
    pick = sorted(rng.choice(len(chunks), n_allowed, replace=False).tolist())
    allowed = {chunks[i].chunk_id for i in pick}
    q = _clustered(1, seed=4)[0]
    hits = idx.search(q, 10, allowed_chunk_ids=allowed)
    assert len(hits) == min(10, n_allowed) and {c for c, _ in hits} <= allowed
    expected = _exact(vecs[pick], [chunks[i].chunk_id for i in pick], q, 10)
    overlap = len({c for c, _ in hits} & set(expected)) / len(expected)
    assert overlap == 1.0 if n_allowed <= 100 else overlap >= 0.8
    assert idx.search(q, 10, allowed_chunk_ids={"nope:0"}) == []


def test_hnsw_incremental_add_replace_delete_and_compaction(data, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    vecs, chunks = data
    idx = FaissIndex(config=HNSW)
    idx.add(chunks[:2000])
    idx.add(chunks[2000:])  # incremental add into the graph
    assert len(idx) == 3000 and idx._index.ntotal == 3000
    assert idx.search(vecs[2500], 1)[0][0] == "d2500:0"
    # replace: same id, new vector -> the old one is a tombstone and never returned
    moved = -vecs[10]
    idx.add([IndexedChunk("d10:0", "d10", "t", "t", vector=moved)])
    assert len(idx) == 3000 and idx._index.ntotal == 3001 and len(idx._dead) == 1
    assert idx.search(moved, 1)[0][0] == "d10:0"
    assert "d10:0" not in [c for c, _ in idx.search(vecs[10], 20)]
    # delete: tombstones are skipped by every search
    idx.delete([f"d{i}:0" for i in range(100, 200)])
    assert len(idx) == 2900
    found = {c for q in vecs[100:200] for c, _ in idx.search(q, 5)}
    assert not found & {f"d{i}:0" for i in range(100, 200)}
    # past the tombstone limit the graph is rebuilt from the live vectors
    monkeypatch.setattr(dense_mod, "_TOMBSTONE_FRACTION", 0.0)
    idx.delete(["d300:0"] + [f"d{i}:0" for i in range(301, 1302)])
    assert idx._dead == set() and idx._index.ntotal == len(idx) == 1898 and idx.kind == "hnsw"
    assert idx.search(vecs[2999], 1)[0][0] == "d2999:0" and idx.search(moved, 1)[0][0] == "d10:0"


def test_auto_switches_to_hnsw_at_the_threshold(data) -> None:  # noqa: ANN001
    vecs, chunks = data
    idx = FaissIndex(config=DenseIndexSettings(kind="auto", hnsw_threshold=1000, hnsw_m=16))
    idx.add(chunks[:999])
    assert idx.kind == "flat" and idx.search(vecs[3], 1)[0][0] == "d3:0"
    idx.delete(["d4:0"])
    assert idx._index.ntotal == 998  # flat removes for real
    idx.add(chunks[999:1100])
    assert idx.kind == "hnsw" and len(idx) == 1099 and idx._index.ntotal == 1099
    assert type(faiss_inner(idx)).__name__ == "IndexHNSWFlat"
    assert idx.search(vecs[3], 1)[0][0] == "d3:0" and idx.search(vecs[1050], 1)[0][0] == "d1050:0"
    assert "d4:0" not in idx
    flat = FaissIndex(config=DenseIndexSettings(kind="flat", hnsw_threshold=10))
    flat.add(chunks[:100])
    assert flat.kind == "flat"


def test_knowledge_base_uses_the_configured_kind_and_keeps_it(tmp_path: Path) -> None:
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import Settings

    s = Settings(home=tmp_path / "h", embeddings={"provider": "fake", "dimensions": 16},
                 dense_index={"kind": "auto", "hnsw_threshold": 3})
    kb = KnowledgeBase.open("hn", s)
    try:
        kb.add_texts([{"text": f"note number {i} about pumps", "source": f"mem://{i}"} for i in range(2)])
        assert kb.indexes["dense"].kind == "flat"
        kb.add_texts([{"text": f"note number {i} about valves", "source": f"mem://{i}"} for i in range(2, 5)])
        assert kb.indexes["dense"].kind == "hnsw" and len(kb.dense_index()) == 5
        top = kb.search("note number 3 about valves", k=2, mode="dense", filter={"source": ["mem://3", "mem://0"]})
        assert [d.metadata["source"] for d in top][0] == "mem://3" and len(top) == 2
        kb.delete_document("mem://3")
    finally:
        kb.close()
    kb = KnowledgeBase.open("hn", s)
    try:
        # each commit is a segment, its kind chosen by its own size; the delete tombstoned a third of the 3-vector
        # HNSW segment, so the merge policy rewrote it without the tombstone (2 vectors: flat)
        assert len(kb.dense_index()) == 4 and [len(s.dead) for s in kb.indexes["dense"].sealed] == [0, 0]
        assert [s.index.kind for s in kb.indexes["dense"].sealed] == ["flat", "flat"]
        assert "mem://3" not in [d.metadata["source"] for d in kb.search("note number 3 about valves", k=4, mode="dense")]
    finally:
        kb.close()


def test_id_map_formats_and_damage(tmp_path: Path) -> None:
    """Ids are saved as arrays (``id_map.npz``: opening a million builds no Python object per id); the formats
    before it (an int array plus one chunk id per line; JSON pairs) are still read; a damaged map is an
    IndexCorruptError naming the file."""
    vecs = _clustered(20)
    idx = FaissIndex()
    idx.add(_chunks(vecs))
    idx.delete(["d3:0"])
    idx.save(tmp_path / "a")
    assert not (tmp_path / "a" / dense_mod.CHUNK_IDS_FILE).exists()
    again = FaissIndex.load(tmp_path / "a")
    assert again.chunk_ids() == idx.chunk_ids() and again.search(vecs[4], 1) == idx.search(vecs[4], 1)
    int_ids = [idx._ids.get(c) for c in idx.chunk_ids()]
    # the format before: an int array and one chunk id per line
    (tmp_path / "a" / ID_MAP_FILE).unlink()
    np.save(tmp_path / "a" / dense_mod.INT_IDS_FILE, np.asarray(int_ids, dtype=np.int64))
    (tmp_path / "a" / dense_mod.CHUNK_IDS_FILE).write_text("\n".join(idx.chunk_ids()), encoding="utf-8")
    lines = FaissIndex.load(tmp_path / "a")
    assert lines.chunk_ids() == idx.chunk_ids() and lines.search(vecs[4], 1) == idx.search(vecs[4], 1)
    # the format before that: pairs inside ids.json
    meta = json.loads((tmp_path / "a" / dense_mod.IDS_FILE).read_text())
    meta["ids"] = [[i, c] for c, i in zip(idx.chunk_ids(), int_ids)]
    (tmp_path / "a" / dense_mod.IDS_FILE).write_text(json.dumps(meta))
    (tmp_path / "a" / dense_mod.CHUNK_IDS_FILE).unlink()
    assert FaissIndex.load(tmp_path / "a").search(vecs[4], 1) == idx.search(vecs[4], 1)
    odd = FaissIndex()
    odd.add([IndexedChunk("line\nbreak", "d", "t", "t", vector=vecs[0]),
             IndexedChunk("竹子:0", "d", "t", "t", vector=vecs[1])])
    odd.save(tmp_path / "b")
    assert FaissIndex.load(tmp_path / "b").chunk_ids() == ["line\nbreak", "竹子:0"]
    assert FaissIndex.load(tmp_path / "b").search(vecs[1], 1)[0][0] == "竹子:0"
    idx.save(tmp_path / "c")
    (tmp_path / "c" / ID_MAP_FILE).write_bytes(b"PK not an npz")
    with pytest.raises(IndexCorruptError, match="unreadable dense index id map"):
        FaissIndex.load(tmp_path / "c")
    (tmp_path / "c" / ID_MAP_FILE).unlink()
    with pytest.raises(IndexCorruptError, match="id_map.npz"):
        FaissIndex.load(tmp_path / "c")


@pytest.mark.parametrize("config", [DenseIndexSettings(kind="flat"), HNSW], ids=["flat", "hnsw"])
def test_loaded_index_is_memory_mapped_and_becomes_writable(config: DenseIndexSettings, tmp_path: Path) -> None:
    """`load` maps the vectors (fast open at a million); the first write reads the file into memory, or, when that
    generation folder is already gone, copies the vectors out of the mapping."""
    vecs = _clustered(300)
    idx = FaissIndex(config=config)
    idx.add(_chunks(vecs))
    idx.save(tmp_path / "g")
    for remove_file in (False, True):
        loaded = FaissIndex.load(tmp_path / "g", config)
        assert (loaded._mapped_from is not None) == bool(dense_mod._mmap_flag())
        assert loaded.search(vecs[5], 3) == idx.search(vecs[5], 3)
        loaded.save(tmp_path / "copy")  # saving a mapped index writes a full copy
        assert FaissIndex.load(tmp_path / "copy", config).search(vecs[6], 2) == idx.search(vecs[6], 2)
        if remove_file:
            (tmp_path / "g" / dense_mod.INDEX_FILE).unlink()
        loaded.delete(["d1:0"])
        loaded.add(_chunks(_clustered(5, seed=9), prefix="new"))
        assert loaded._mapped_from is None and len(loaded) == 304 and "d1:0" not in loaded
        assert loaded.search(_clustered(5, seed=9)[2], 1)[0][0] == "new2:0"
        assert loaded.search(vecs[7], 1)[0][0] == "d7:0"


@pytest.mark.parametrize("config", [DenseIndexSettings(kind="flat"), HNSW], ids=["flat", "hnsw"])
def test_hidden_chunks_and_forks(config: DenseIndexSettings, tmp_path: Path) -> None:
    """`hide` (a segment's tombstone) drops chunks from searches through an id selector built once per change: a
    second hide after a search is honoured too. A `fork` shares the FAISS data, and hiding in it leaves the original
    as it was; both answer exactly what a brute-force search over their live vectors gives."""
    vecs = _clustered(200, seed=2)
    idx = FaissIndex(config=config)
    idx.add(_chunks(vecs))
    idx.save(tmp_path / "s")
    loaded = FaissIndex.load(tmp_path / "s", config)
    ids = [f"d{i}:0" for i in range(len(vecs))]

    def exact(q: np.ndarray, hidden: set[str], k: int = 5) -> list[str]:
        order = np.argsort(-(vecs @ q), kind="stable")
        return [ids[i] for i in order if ids[i] not in hidden][:k]

    q = vecs[7]
    loaded.hide(exact(q, set(), 1))
    assert [c for c, _ in loaded.search(q, 5)] == exact(q, {"d7:0"})
    second = exact(q, {"d7:0"}, 2)
    loaded.hide(second)  # after a search built the selector
    hidden = {"d7:0", *second}
    assert [c for c, _ in loaded.search(q, 5)] == exact(q, hidden) and len(loaded) == 197
    fork = loaded.fork()
    assert fork._index is loaded._index
    fork.hide(exact(q, hidden, 1))
    assert [c for c, _ in loaded.search(q, 5)] == exact(q, hidden) and len(loaded) == 197
    assert [c for c, _ in fork.search(q, 5)] == exact(q, hidden | set(exact(q, hidden, 1))) and len(fork) == 196
    assert "d7:0" not in loaded and fork.chunk_ids() == [c for c in loaded.chunk_ids() if c in fork]
