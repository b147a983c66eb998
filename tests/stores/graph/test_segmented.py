"""The graph index as segments (`ctxrag.stores.graph.segmented`): after every commit of adds, re-adds and deletes,
saved as a generation and read back from disk, the merged graph equals the graph built from the same live passages in
one go (entities, relations, passages, vectors, incidence, entity and relation searches), through tiered merges and a
merge of everything; a commit writes only its new segment; a graph saved whole before segments is read and adopted;
a damaged segment file is a named error. Real files; deterministic fake embeddings."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from ctxrag.errors import IndexCorruptError
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.engine.generations import GenerationStore
from ctxrag.stores.graph import GraphIndex
from ctxrag.stores.graph.segmented import SegmentedGraphIndex, union
from ctxrag.stores.engine.segments import SET_FILE, MergePolicy

EMB = DeterministicFakeEmbedding(size=16)
NAMES = ["Euler", "Bernoulli", "Basel", "Gauss", "Riemann", "Noether", "Hilbert", "Cantor", "Turing", "Lovelace"]
PREDICATES = ["taught", "met", "cited", "lived in", "wrote to"]


def _chunk(cid: str, rng: np.random.Generator) -> IndexedChunk:
    triplets = [[str(rng.choice(NAMES)), str(rng.choice(PREDICATES)), str(rng.choice(NAMES))]
                for _ in range(int(rng.integers(0, 4)))]
    text = f"passage {cid}: " + "; ".join(" ".join(t) for t in triplets)
    return IndexedChunk(cid, cid.split(":")[0], text, text, metadata={"triplets": triplets, "n": int(rng.integers(9))})


def _canon(g: GraphIndex) -> dict[str, Any]:
    st = g.state()
    vec = lambda v: tuple(np.round(v, 6).tolist())  # noqa: E731
    inc = g.incidence.tocoo()
    return {
        "entities": {k: (n, vec(v)) for k, n, v in zip(st.entity_keys, st.entity_names, st.entity_vectors)},
        "relations": {r.key: (r.text, st.entity_keys[r.subject], st.entity_keys[r.object], sorted(r.passages),
                              vec(v)) for r, v in zip(st.relations, st.relation_vectors)},
        "passages": {pid: (p.text, sorted(st.relations[r].key for r in p.relations), p.metadata)
                     for pid, p in st.passages.items()},
        "incidence": sorted((st.entity_keys[e], st.relations[r].key) for e, r in zip(inc.row, inc.col)),
    }


def _searches(g: GraphIndex) -> list[list[tuple[str, float]]]:
    rng = np.random.default_rng(7)
    st = g.state()
    out = []
    for _ in range(5):
        q = rng.standard_normal(16).astype(np.float32)
        out.append([(st.entity_keys[i], round(s, 5)) for i, s in g.search_entities(q, 4)])
        out.append([(st.relations[i].key, round(s, 5)) for i, s in g.search_relations(q, 4)])
    return out


def _whole(live: dict[str, IndexedChunk]) -> GraphIndex:
    g = GraphIndex(EMB, show_progress=False)
    g.add(list(live.values()))
    return g


def test_segments_read_back_equal_the_whole_graph_after_adds_deletes_and_merges(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    gens = GenerationStore(tmp_path, "t")
    policy = MergePolicy(merge_factor=3, min_size=4)
    index = SegmentedGraphIndex.empty(EMB, policy=policy)
    live: dict[str, IndexedChunk] = {}
    n, merges = 0, 0
    for gen in range(1, 13):
        adds = [_chunk(f"d{n + i}:0", rng) for i in range(int(rng.integers(1, 6)))]
        n += len(adds)
        if live and gen % 3 == 0:  # re-add (replace) an existing passage with new triplets
            adds.append(_chunk(str(rng.choice(list(live))), rng))
        dels = [str(c) for c in rng.choice(list(live), size=min(len(live), int(rng.integers(0, 3))), replace=False)]
        index.delete(dels)
        for c in dels:
            live.pop(c)
        index.add(adds)
        for c in adds:
            live.pop(c.chunk_id, None)
            live[c.chunk_id] = c
        if gen == 12:
            index.merge_all()
        before = len(index.sealed)
        with gens.write_lock():
            gens.write(gen, {"graph": index})
            gens.clean(gen)
        merges += len(index.sealed) < before + 1
        loaded = SegmentedGraphIndex.load(gens.gen_dir(gen) / "graph", EMB, policy=policy)
        whole = _whole(live)
        assert _canon(loaded.view) == _canon(whole) == _canon(index.view), f"generation {gen}"
        assert _searches(loaded.view) == _searches(whole)
        assert sorted(loaded.chunk_ids()) == sorted(live) and len(loaded) == len(live)
        index = loaded  # the next commit starts from what was read, as a write session does
    assert merges >= 2 and len(index.sealed) == 1 and not index.sealed[0].dead


def test_a_commit_writes_only_its_new_segment(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    gens = GenerationStore(tmp_path, "t")
    index = SegmentedGraphIndex.empty(EMB, policy=MergePolicy(merge_factor=100))
    index.add([_chunk(f"d{i}:0", rng) for i in range(40)])
    with gens.write_lock():
        gens.write(1, {"graph": index})
    first = index.sealed[0].directory
    inodes = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in first.iterdir()}
    index = SegmentedGraphIndex.load(gens.gen_dir(1) / "graph", EMB)
    index.add([_chunk("new:0", rng)])
    index.delete(["d3:0"])
    with gens.write_lock():
        gens.write(2, {"graph": index})
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in first.iterdir()} == inodes
    doc = json.loads((gens.gen_dir(2) / "graph" / SET_FILE).read_text())
    assert [s["dead"] for s in doc["segments"]] == [["d3:0"], []]
    new = json.loads((gens.segments_dir / doc["segments"][1]["id"] / "graph.json").read_text())
    assert list(new["passages"]) == ["new:0"]
    assert sorted(os.listdir(gens.gen_dir(2) / "graph")) == [SET_FILE]


def test_a_graph_saved_whole_is_read_and_adopted_on_the_first_write(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    gens = GenerationStore(tmp_path, "t")
    chunks = [_chunk(f"d{i}:0", rng) for i in range(10)]
    old = _whole({c.chunk_id: c for c in chunks})
    with gens.write_lock():
        gens.write(1, {"graph": old})  # the design before graph segments
    assert (gens.gen_dir(1) / "graph" / "graph.json").exists()
    index = SegmentedGraphIndex.load(gens.gen_dir(1) / "graph", EMB)
    assert _canon(index.view) == _canon(old)
    extra = _chunk("x:0", rng)
    index.add([extra])
    with gens.write_lock():
        gens.write(2, {"graph": index})
    doc = json.loads((gens.gen_dir(2) / "graph" / SET_FILE).read_text())
    adopted = gens.segments_dir / doc["segments"][0]["id"] / "graph.json"
    assert len(doc["segments"]) == 2 and adopted.stat().st_nlink == 2  # hard-linked, not rewritten
    again = SegmentedGraphIndex.load(gens.gen_dir(2) / "graph", EMB)
    assert _canon(again.view) == _canon(_whole({**{c.chunk_id: c for c in chunks}, "x:0": extra}))


@pytest.mark.parametrize("damage", ["truncate", "flip", "remove"])
def test_a_damaged_graph_segment_is_a_named_error(tmp_path: Path, damage: str) -> None:
    rng = np.random.default_rng(3)
    gens = GenerationStore(tmp_path, "t")
    index = SegmentedGraphIndex.empty(EMB)
    index.add([_chunk(f"d{i}:0", rng) for i in range(5)])
    with gens.write_lock():
        gens.write(1, {"graph": index})
    target = index.sealed[0].directory / "graph.json"
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        target.write_bytes(data[:-2] + bytes([data[-2] ^ 1]) + data[-1:])
    else:
        target.unlink()
    with pytest.raises(IndexCorruptError, match=r"graph\.json.*kb repair"):
        SegmentedGraphIndex.load(gens.gen_dir(1) / "graph", EMB)


def test_a_graph_built_in_memory_is_saved_as_one_segment(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    chunks = {c.chunk_id: c for c in (_chunk(f"d{i}:0", rng) for i in range(6))}
    gens = GenerationStore(tmp_path, "t")
    with gens.write_lock():
        gens.write(1, {"graph": SegmentedGraphIndex.of(_whole(chunks))})
    loaded = SegmentedGraphIndex.load(gens.gen_dir(1) / "graph", EMB)
    assert len(loaded.sealed) == 1 and _canon(loaded.view) == _canon(_whole(chunks))


def test_union_drops_what_only_tombstoned_passages_used_and_keeps_what_later_parts_share() -> None:
    first = [IndexedChunk("a:0", "a", "a", "a", metadata={"triplets": [["Euler", "met", "Gauss"], ["Only", "in", "a"]]}),
             IndexedChunk("b:0", "b", "b", "b", metadata={"triplets": [["Gauss", "cited", "Riemann"]]})]
    later = [IndexedChunk("c:0", "c", "c", "c", metadata={"triplets": [["Euler", "met", "Gauss"]]})]
    parts = []
    for chunks, dead in ((first, {"a:0"}), (later, set())):
        g = GraphIndex(EMB, show_progress=False)
        g.add(chunks)
        parts.append((g.state(), dead))
    merged = GraphIndex.from_state(union(parts), EMB)
    assert _canon(merged) == _canon(_whole({c.chunk_id: c for c in (first[1], later[0])}))
    assert merged.entity_id("Only") is None and merged.n_relations == 2
