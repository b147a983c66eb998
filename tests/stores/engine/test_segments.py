"""Segmented indexes (`ctxrag.stores.engine.segments`): results identical to one index over the same live chunks, after
adds, deletes, re-adds, saves with tombstones, loads and merges. BM25 is compared with one `BM25Index` built from the
survivors (every variant) and with rank_bm25; dense with a brute-force numpy search. Real FAISS, real files."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from ctxrag.errors import IndexCorruptError
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.bm25 import BM25ChunkIndex
from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.bm25.segmented import SegmentedKeywordIndex
from ctxrag.stores.vectors.dense import FaissIndex
from ctxrag.stores.vectors.dense_segments import SegmentedDenseIndex
from ctxrag.stores.engine.generations import GenerationStore
import ctxrag.stores.engine.segment_checksums as segment_checksums
from ctxrag.stores.engine.segments import SET_FILE, MergePolicy, SegmentedIndex

DIM = 16
WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon "
         "phi chi psi omega amber copper frost ember").split()


def _text(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(3, 15))))


def _chunk(cid: str, text: str, rng: np.random.Generator) -> IndexedChunk:
    v = rng.standard_normal(DIM).astype(np.float32)
    return IndexedChunk(cid, cid.split(":")[0], text, text, vector=v / np.linalg.norm(v))


def _bm25(variant: str = "okapi") -> SegmentedKeywordIndex:
    return SegmentedKeywordIndex("bm25", lambda: BM25ChunkIndex("english", variant),
                                 lambda d: BM25ChunkIndex.load(d), policy=MergePolicy(merge_factor=3, min_size=5))


def _dense() -> SegmentedDenseIndex:
    return SegmentedDenseIndex("dense", FaissIndex, FaissIndex.load, policy=MergePolicy(merge_factor=3, min_size=5))


def _history(tmp_path: Path, indexes: dict[str, SegmentedIndex], seed: int = 0,
             reopen: bool = False) -> dict[str, IndexedChunk]:
    """Ten commits of adds, re-adds and deletes, each saved as a generation and loaded back (with `reopen`: from the
    index just saved, sharing its segments, as a write session does); returns the live chunks in insertion order (a
    re-added chunk moves to the end, as in one index)."""
    rng = np.random.default_rng(seed)
    live: dict[str, IndexedChunk] = {}
    gens = GenerationStore(tmp_path, "t")
    n = 0
    for gen in range(1, 11):
        adds = [_chunk(f"d{n + i}:0", _text(rng), rng) for i in range(int(rng.integers(1, 12)))]
        n += len(adds)
        if live and gen % 2 == 0:  # replace some existing chunks with new text
            for cid in rng.choice(list(live), size=min(3, len(live)), replace=False):
                adds.append(_chunk(str(cid), _text(rng), rng))
        dels = [str(c) for c in rng.choice(list(live), size=min(len(live), int(rng.integers(0, 4))), replace=False)] \
            if live and gen % 3 == 0 else []
        for index in indexes.values():
            index.add(adds)
            index.delete(dels)
        for c in adds:
            live.pop(c.chunk_id, None)
            live[c.chunk_id] = c
        for c in dels:
            live.pop(c, None)
        with gens.write_lock():
            gens.write(gen, indexes)
        for name, index in list(indexes.items()):
            if reopen:
                indexes[name] = index.reopen(gens.gen_dir(gen) / name)  # type: ignore[assignment]
                continue
            loaded = type(index)(name, index._make, index._load_segment, policy=index.policy)
            indexes[name] = loaded.load_set(gens.gen_dir(gen) / name)  # type: ignore[assignment]
    return live


def _reference(live: dict[str, IndexedChunk], variant: str = "okapi") -> BM25ChunkIndex:
    ref = BM25ChunkIndex("english", variant)
    ref.add(list(live.values()))
    return ref


QUERIES = ["alpha", "beta gamma", "omega omega amber", "frost ember copper pi", "nothingmatches", "alpha beta gamma "
           "delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron"]


@pytest.mark.parametrize("reopen", [False, True], ids=["load", "reopen"])
@pytest.mark.parametrize("variant", ["okapi", "bm25+", "bm25l"])
def test_bm25_across_segments_scores_like_one_index(tmp_path: Path, variant: str, reopen: bool) -> None:
    indexes: dict[str, SegmentedIndex] = {"bm25": _bm25(variant)}
    live = _history(tmp_path, indexes, reopen=reopen)
    seg = indexes["bm25"]
    assert len(seg.sealed) > 1 and any(s.dead for s in seg.sealed)  # really segmented, with tombstones
    ref = _reference(live, variant)
    assert seg.chunk_ids() == ref.chunk_ids() and len(seg) == len(ref)
    for q in QUERIES:
        for k in (1, 5, 100):
            got, want = seg.search(q, k), ref.search(q, k)  # type: ignore[attr-defined]
            assert [c for c, _ in got] == [c for c, _ in want], q
            assert np.allclose([s for _, s in got], [s for _, s in want], rtol=1e-12, atol=1e-12), q
        allowed = set(list(live)[::2])
        got = seg.search(q, 5, allowed_chunk_ids=allowed, fill=True)  # type: ignore[attr-defined]
        want = ref.search(q, 5, allowed_chunk_ids=allowed, fill=True)
        assert [c for c, _ in got] == [c for c, _ in want], q


def test_bm25_across_segments_matches_rank_bm25(tmp_path: Path) -> None:
    indexes: dict[str, SegmentedIndex] = {"bm25": _bm25()}
    live = _history(tmp_path, indexes, seed=3)
    seg = indexes["bm25"]
    corpus = [c.text.split() for c in live.values()]
    ranker = BM25Okapi(corpus)
    ids = list(live)
    for q in QUERIES[:4]:
        scores = ranker.get_scores(q.split())
        got = dict(seg.search(q, len(ids)))  # type: ignore[attr-defined]
        for cid, want in zip(ids, scores):
            if cid in got:
                assert got[cid] == pytest.approx(want, rel=1e-9, abs=1e-9)
            else:
                assert not set(q.split()) & set(live[cid].text.split())


@pytest.mark.parametrize("reopen", [False, True], ids=["load", "reopen"])
def test_dense_across_segments_is_exact(tmp_path: Path, reopen: bool) -> None:
    indexes: dict[str, SegmentedIndex] = {"dense": _dense()}
    live = _history(tmp_path, indexes, seed=5, reopen=reopen)
    seg = indexes["dense"]
    assert len(seg.sealed) > 1 and any(s.dead for s in seg.sealed)
    ids = list(live)
    vecs = np.stack([live[c].vector for c in ids])  # type: ignore[misc]
    assert np.allclose(seg.vectors(ids[:7]), vecs[:7])  # type: ignore[attr-defined]
    rng = np.random.default_rng(9)
    for _ in range(20):
        q = rng.standard_normal(DIM).astype(np.float32)
        q /= np.linalg.norm(q)
        want = [ids[i] for i in np.argsort(-(vecs @ q), kind="stable")[:10]]
        got = seg.search(q, 10)  # type: ignore[attr-defined]
        assert [c for c, _ in got] == want
        allowed = set(ids[::3])
        want = [c for c in want if c in allowed]
        got = [c for c, _ in seg.search(q, 10, allowed_chunk_ids=allowed)]  # type: ignore[attr-defined]
        assert got[: len(want)] == want[: len(got)] and set(got) <= allowed


@pytest.mark.parametrize("kind", ["dense", "bm25"])
def test_reopen_shares_loaded_segments_and_never_changes_the_published_index(tmp_path: Path, kind: str) -> None:
    """A write session starts from the published generation with `reopen`: the segments both list are forked (the
    same FAISS data / BM25 postings, their own tombstones), not loaded again; results stay identical to a fresh load,
    and the session's deletes never reach the published index readers search."""
    indexes: dict[str, SegmentedIndex] = {kind: _dense() if kind == "dense" else _bm25()}
    live = _history(tmp_path, indexes, seed=4, reopen=True)
    published = indexes[kind]
    gen_dir = tmp_path / "indexes" / "gen-000010" / kind
    fresh = type(published)(kind, published._make, published._load_segment, policy=published.policy).load_set(gen_dir)
    rng = np.random.default_rng(3)
    vecs = [v / np.linalg.norm(v) for v in rng.standard_normal((8, DIM)).astype(np.float32)]
    queries: list = vecs if kind == "dense" else QUERIES

    def results(index: SegmentedIndex) -> list:
        return [index.search(q, 8) for q in queries]  # type: ignore[attr-defined]

    assert fresh is not None and results(published) == results(fresh) and len(published) == len(live)
    before = results(published)
    session = published.reopen(gen_dir)
    assert session is not None and [s.id for s in session.sealed] == [s.id for s in published.sealed]
    for mine, theirs in zip(session.sealed, published.sealed):
        assert mine.index is not theirs.index and mine.dead == theirs.dead and mine.dead is not theirs.dead
        if kind == "dense":
            assert mine.index._index is theirs.index._index  # type: ignore[attr-defined]
        else:
            assert mine.index.index._blocks[0] is theirs.index.index._blocks[0]  # type: ignore[attr-defined]
    victims, late = list(live)[::2], _chunk("late:0", "amber frost omega", rng)
    for index in (session, fresh):
        index.delete(victims)
        index.add([late])
    assert results(published) == before and len(published) == len(live)
    assert results(session) == results(fresh) and len(session) == len(live) - len(victims) + 1


def test_commit_writes_only_the_new_segment_and_shares_the_rest(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    gens = GenerationStore(tmp_path, "t")
    index = _bm25()
    index.policy = MergePolicy(merge_factor=100)
    index.add([_chunk(f"d{i}:0", _text(rng), rng) for i in range(50)])
    with gens.write_lock():
        gens.write(1, {"bm25": index})
    first = index.sealed[0].directory
    inodes = {p.name: p.stat().st_ino for p in first.iterdir()}
    index.add([_chunk("new:0", "amber frost", rng)])
    index.delete(["d3:0"])
    with gens.write_lock():
        gens.write(2, {"bm25": index})
        gens.clean(2)
    assert [s.directory for s in index.sealed][0] == first  # referenced, not rewritten
    assert {p.name: p.stat().st_ino for p in first.iterdir()} == inodes
    doc = json.loads((gens.gen_dir(2) / "bm25" / SET_FILE).read_text())
    assert [len(s["dead"]) for s in doc["segments"]] == [1, 0] and doc["segments"][1]["size"] == 1
    assert sorted(os.listdir(gens.segments_dir)) == sorted(s.id for s in index.sealed)


def test_clean_removes_only_segments_no_kept_generation_lists(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    gens = GenerationStore(tmp_path, "t")
    index = _bm25()
    index.policy = MergePolicy(merge_factor=2, min_size=1)  # merge at every second segment
    seen = []
    for gen in range(1, 6):
        index.add([_chunk(f"g{gen}:{i}", _text(rng), rng) for i in range(3)])
        with gens.write_lock():
            gens.write(gen, {"bm25": index})
            gens.clean(gen)
        seen.append({s.id for s in index.sealed})
    present = set(os.listdir(gens.segments_dir))
    assert present == seen[-1] | seen[-2]  # the current and the previous generation's segments, nothing else
    assert len(index) == 15


def test_merge_policy_tiers_and_tombstones() -> None:
    policy = MergePolicy(merge_factor=3, min_size=10)
    assert policy.pick([100, 5, 5], [0, 0, 0]) is None
    assert policy.pick([100, 5, 5, 5], [0, 0, 0, 0]) == range(1, 4)
    assert policy.pick([100, 30, 30, 30], [0, 0, 0, 0]) == range(1, 4)
    assert policy.pick([1000, 30, 30, 5], [0, 0, 0, 0]) is None
    assert policy.pick([100, 10], [40, 0]) == range(0, 1)
    with pytest.raises(ValueError, match="merge_factor"):
        MergePolicy(merge_factor=1)


def test_merge_all_gives_one_segment_with_the_same_results(tmp_path: Path) -> None:
    indexes: dict[str, SegmentedIndex] = {"bm25": _bm25(), "dense": _dense()}
    live = _history(tmp_path, indexes, seed=7)
    q = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)
    before = {q_: indexes["bm25"].search(q_, 10) for q_ in QUERIES}  # type: ignore[attr-defined]
    dense_before = indexes["dense"].search(q, 10)  # type: ignore[attr-defined]
    gens = GenerationStore(tmp_path, "t")
    for index in indexes.values():
        index.merge_all()
    with gens.write_lock():
        gens.write(11, indexes)
        gens.clean(11)
    for name in indexes:
        assert len(indexes[name].sealed) == 1 and not indexes[name].sealed[0].dead
        reloaded = type(indexes[name])(name, indexes[name]._make, indexes[name]._load_segment)
        indexes[name] = reloaded.load_set(gens.gen_dir(11) / name)  # type: ignore[assignment]
    for q_ in QUERIES:
        got = indexes["bm25"].search(q_, 10)  # type: ignore[attr-defined]
        assert [c for c, _ in got] == [c for c, _ in before[q_]]
        assert np.allclose([s for _, s in got], [s for _, s in before[q_]], rtol=1e-12)
    assert [c for c, _ in indexes["dense"].search(q, 10)] == [c for c, _ in dense_before]  # type: ignore[attr-defined]
    assert indexes["bm25"].chunk_ids() == list(live)


def test_pre_segment_generation_is_read_as_one_segment_and_linked_on_first_write(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    chunks = [_chunk(f"d{i}:0", _text(rng), rng) for i in range(20)]
    gens = GenerationStore(tmp_path, "t")
    plain = BM25ChunkIndex("english")
    plain.add(chunks)
    with gens.write_lock():
        gens.write(1, {"bm25": plain})  # the old format: the whole index in the generation folder
    old_file = gens.gen_dir(1) / "bm25" / "bm25.npz"
    index = _bm25().load_set(gens.gen_dir(1) / "bm25")
    assert index is not None and index.search("alpha", 3) == plain.search("alpha", 3)  # type: ignore[attr-defined]
    index.delete(["d0:0"])
    with gens.write_lock():
        gens.write(2, {"bm25": index})
    adopted = index.sealed[0].directory / "bm25.npz"
    assert adopted.stat().st_ino == old_file.stat().st_ino  # hard link, not a copy
    again = _bm25().load_set(gens.gen_dir(2) / "bm25")
    assert again is not None and "d0:0" not in again and len(again) == 19


@pytest.mark.parametrize("fresh_process", [False, True])
@pytest.mark.parametrize("damage", ["truncate", "garble", "delete", "segment_list"])
def test_damaged_segment_is_a_named_error(tmp_path: Path, damage: str, fresh_process: bool) -> None:
    rng = np.random.default_rng(6)
    gens = GenerationStore(tmp_path, "t")
    index = _bm25()
    index.add([_chunk(f"d{i}:0", _text(rng), rng) for i in range(20)])
    with gens.write_lock():
        gens.write(1, {"bm25": index})
    target = index.sealed[0].directory / "bm25.npz"
    if damage == "truncate":
        os.truncate(target, 10)
    elif damage == "garble":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "delete":
        target.unlink()
    else:
        target = gens.gen_dir(1) / "bm25" / SET_FILE
        target.write_text("{", encoding="utf-8")
    if fresh_process:  # only the segment's verified marker, written at publish, knows the file
        segment_checksums._verified.clear()
    with pytest.raises(IndexCorruptError, match=target.name) as err:
        _bm25().load_set(gens.gen_dir(1) / "bm25")
    assert "kb repair" in str(err.value)


def test_merging_bm25_drops_terms_only_deleted_documents_had() -> None:
    seg = _bm25()
    a, b = BM25ChunkIndex("english"), BM25ChunkIndex("english")
    rng = np.random.default_rng(0)
    a.add([_chunk("x:0", "uniqueword alpha", rng), _chunk("y:0", "alpha beta", rng)])
    b.add([_chunk("z:0", "beta gamma", rng)])
    a.delete(["x:0"])
    merged = seg.merged([(a, set()), (b, set())])
    assert isinstance(merged, BM25ChunkIndex) and merged.chunk_ids() == ["y:0", "z:0"]
    assert "uniqueword" not in merged.index.vocabulary
    ref = BM25Index("english")
    ref.add(["alpha beta", "beta gamma"], ids=["y:0", "z:0"])
    assert merged.search("beta gamma", 2) == ref.search("beta gamma", 2)


def test_sealed_bm25_segment_is_one_postings_block_with_the_same_results(tmp_path: Path) -> None:
    """A write session's BM25 index grows in postings blocks (one per add, merged like a binary counter); sealed,
    it is searched by every later query and never appended to, so it is saved as one: each query term is then read
    once, not once per block. Scores and ties are unchanged."""
    rng = np.random.default_rng(5)
    seg = _bm25()
    chunks = [_chunk(f"d{i}:0", _text(rng), rng) for i in range(60)]
    for start, end in ((0, 40), (40, 52), (52, 58), (58, 60)):  # newer adds smaller: several postings blocks
        seg.add(chunks[start:end])
    fresh = seg.fresh.index  # type: ignore[union-attr]
    assert len(fresh._blocks) > 1
    before = {(q, k): seg.search(q, k) for q in QUERIES for k in (1, 5, 100)}
    gen_dir = tmp_path / "indexes" / "gen-000001" / "bm25"
    seg.save_segments(gen_dir, tmp_path / "indexes" / "segments", generation=1)
    assert len(seg.sealed) == 1 and len(fresh._blocks) == 1  # the saved and the in-memory index alike
    loaded = _bm25().load_set(gen_dir)
    assert loaded is not None and len(loaded.sealed[0].index.index._blocks) == 1  # type: ignore[attr-defined]
    ref = _reference({c.chunk_id: c for c in chunks})
    for (q, k), got in before.items():
        want = ref.search(q, k)
        for result in (got, seg.search(q, k), loaded.search(q, k)):  # type: ignore[attr-defined]
            assert [c for c, _ in result] == [c for c, _ in want], q
            assert np.allclose([s for _, s in result], [s for _, s in want], rtol=1e-12, atol=1e-12), q


def test_bm25_segments_and_merges_keep_the_tokenizer_of_the_oldest_segment(tmp_path: Path) -> None:
    """Queries go through the oldest segment's tokenizer, so a segment added after `make` changed (``bm25_stem``
    turned off for a knowledge base built with it) and a merge of segments tokenize as the oldest one does."""
    stem = {"on": True}
    seg: SegmentedIndex = SegmentedKeywordIndex(
        "bm25", lambda: BM25ChunkIndex("english", stem=stem["on"]), lambda d: BM25ChunkIndex.load(d))
    gens = GenerationStore(tmp_path, "t")
    seg.add([IndexedChunk("a:0", "a", "indexing the tables", "indexing the tables")])
    with gens.write_lock():
        gens.write(1, {"bm25": seg})
    seg = SegmentedKeywordIndex("bm25", seg._make, seg._load_segment).load_set(gens.gen_dir(1) / "bm25")
    stem["on"] = False
    seg.add([IndexedChunk("b:0", "b", "two indexes of rows", "two indexes of rows")])
    assert {c for c, _ in seg.search("indexing", 5)} == {"a:0", "b:0"}  # type: ignore[attr-defined]
    seg.merge_all()
    with gens.write_lock():
        gens.write(2, {"bm25": seg})
    merged = SegmentedKeywordIndex("bm25", seg._make, seg._load_segment).load_set(gens.gen_dir(2) / "bm25")
    assert len(merged.sealed) == 1
    assert {c for c, _ in merged.search("indexing", 5)} == {"a:0", "b:0"}  # type: ignore[attr-defined]
