from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from ctxrag.errors import ConfigError, IndexCorruptError
from ctxrag.stores.graph import GraphIndex, Triplet
from ctxrag.stores.base import ChunkIndex, IndexedChunk


def test_bernoulli_graph_structure(bernoulli_graph: GraphIndex) -> None:
    g = bernoulli_graph
    assert len(g) == 4
    # "leonhard  Euler" in one triplet and "Leonhard Euler" elsewhere are one node
    assert g.entity_id("leonhard euler") == g.entity_id("Leonhard Euler") is not None
    euler = g.entity_id("Leonhard Euler")
    texts = {g.relation_text(r) for r in g.entity_relations(euler)}
    assert "Johann Bernoulli teacher of Leonhard Euler" in texts and "leonhard Euler contributed to graph theory" in texts
    assert g.incidence.shape == (g.n_entities, g.n_relations)
    assert g.incidence.sum() == 2 * g.n_relations
    assert g.entity_vectors.shape == (g.n_entities, 384) and g.relation_vectors.shape == (g.n_relations, 384)
    assert np.allclose(np.linalg.norm(g.relation_vectors, axis=1), 1.0, atol=1e-4)
    rid = next(r for r in range(g.n_relations) if g.relation_text(r) == "Daniel Bernoulli son of Johann Bernoulli")
    assert g.relation_passages(rid) == ["daniel"]


def test_similarity_search_finds_the_right_entity(bernoulli_graph: GraphIndex, e5) -> None:  # noqa: ANN001
    from ctxrag.models.embeddings import embed_array

    vec = embed_array(e5, ["Euler"])[0]
    top = bernoulli_graph.search_entities(vec, 1)
    assert bernoulli_graph.entity_name(top[0][0]) == "Leonhard Euler"
    scores = [s for _, s in bernoulli_graph.search_entities(vec, 5)]
    assert scores == sorted(scores, reverse=True)


def test_entity_mentions(bernoulli_graph: GraphIndex) -> None:
    got = bernoulli_graph.find_entity_mentions("What contribution did the son of Euler's teacher make?")
    assert got == ["Euler"]
    got = bernoulli_graph.find_entity_mentions("Where was daniel bernoulli born, and what is Hydrodynamica?")
    assert got[:2] == ["Daniel Bernoulli", "Hydrodynamica"]


def test_chinese_mentions_and_keys() -> None:
    g = GraphIndex(DeterministicFakeEmbedding(size=8), show_progress=False)
    g.add_passages([("p", "丹尼尔·伯努利是约翰·伯努利的儿子。", [("丹尼尔·伯努利", "父亲", "约翰·伯努利")])])
    assert g.entity_id("丹尼尔 伯努利") is not None
    assert set(g.find_entity_mentions("约翰·伯努利的儿子是谁？")) == {"约翰·伯努利"}


def _fake_index() -> GraphIndex:
    g = GraphIndex(DeterministicFakeEmbedding(size=8), show_progress=False)
    g.add_passages(
        [
            ("p1", "one", [("A", "p", "B"), ("B", "q", "C")]),
            ("p2", "two", [("B", "q", "C"), ("C", "r", "D")]),
        ],
        metadata=[{"title": "one", "triplets": "dropped"}, {"title": "two"}],
    )
    return g


def test_add_shares_relations_and_delete_cleans_up() -> None:
    g = _fake_index()
    assert (len(g), g.n_entities, g.n_relations) == (2, 4, 3)
    shared = g.passage_relations("p2")[0]
    assert g.relation_passages(shared) == ["p1", "p2"]
    assert g.passage_metadata("p1") == {"title": "one"}
    g.delete_passages(["p1", "unknown"])
    assert (len(g), g.n_entities, g.n_relations) == (1, 3, 2)
    assert g.entity_id("A") is None
    assert [g.relation_text(r) for r in g.passage_relations("p2")] == ["B q C", "C r D"]
    assert g.incidence.shape == (3, 2) and g.entity_vectors.shape == (3, 8)
    g.delete_passages(["p2"])
    assert (len(g), g.n_entities, g.n_relations) == (0, 0, 0)
    assert g.search_relations(np.ones(8, dtype=np.float32), 3) == []


def test_re_adding_a_passage_replaces_it() -> None:
    g = _fake_index()
    g.add_passages([("p1", "one again", [("A", "s", "E")])])
    assert g.passage_text("p1") == "one again"
    assert sorted(g.relation_text(r) for r in range(g.n_relations)) == ["A s E", "B q C", "C r D"]
    with pytest.raises(ValueError, match="duplicate passage ids"):
        g.add_passages([("x", "a", []), ("x", "b", [])])
    with pytest.raises(ValueError, match="metadata has 1 entries for 2"):
        g.add_passages([("x", "a", []), ("y", "b", [])], metadata=[{}])


def test_save_load_round_trip(tmp_path: Path) -> None:
    g = _fake_index()
    g.save(tmp_path / "g")
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["graph.json", "incidence.npz", "vectors.npz"]
    h = GraphIndex.load(tmp_path / "g", g.embeddings, show_progress=False)
    assert (len(h), h.n_entities, h.n_relations) == (2, 4, 3)
    assert np.array_equal(h.relation_vectors, g.relation_vectors)
    assert (h.incidence != g.incidence).nnz == 0
    h.add_passages([("p3", "three", [("D", "s", "A")])])  # still updatable after load
    assert h.n_relations == 4


def test_load_detects_corruption(tmp_path: Path) -> None:
    g = _fake_index()
    g.save(tmp_path / "g")
    doc = json.loads((tmp_path / "g" / "graph.json").read_text())
    doc["relations"].pop()
    (tmp_path / "g" / "graph.json").write_text(json.dumps(doc))
    with pytest.raises(IndexCorruptError, match="relation vectors for 2 relations"):
        GraphIndex.load(tmp_path / "g", g.embeddings)
    (tmp_path / "g" / "graph.json").write_text("{not json")
    with pytest.raises(IndexCorruptError, match="graph.json"):
        GraphIndex.load(tmp_path / "g", g.embeddings)
    with pytest.raises(IndexCorruptError, match="graph.json"):
        GraphIndex.load(tmp_path / "missing", g.embeddings)


def test_chunk_index_protocol() -> None:
    g = GraphIndex(DeterministicFakeEmbedding(size=8), show_progress=False)
    assert isinstance(g, ChunkIndex) and g.name == "graph"
    g.add([IndexedChunk("d:0", "d", "ctx + text", "text", metadata={"triplets": [["A", "p", "B"]], "title": "T"})])
    assert g.passage_text("d:0") == "text" and g.passage_metadata("d:0") == {"title": "T", "doc_id": "d"}
    with pytest.raises(ConfigError, match="'d:1' has no metadata\\['triplets'\\]"):
        g.add([IndexedChunk("d:1", "d", "x", "x")])
    seen = []
    g.extractor = lambda text: seen.append(text) or [Triplet("B", "q", "C")]
    g.add([IndexedChunk("d:1", "d", "indexed text", "x")])
    assert seen == ["indexed text"] and g.n_relations == 2
    g.delete(["d:0"])
    assert len(g) == 1


def test_lowercase_common_words_are_not_seeds() -> None:
    g = GraphIndex(DeterministicFakeEmbedding(size=8), show_progress=False)
    g.add_passages([("p", "t", [("Texas", "is a", "state"), ("Texas", "founded", "1845"), ("the", "x", "river bank")])])
    assert g.find_entity_mentions("Which state borders texas, founded in 1845 by the river bank?") == [
        "river bank", "1845"
    ]
    assert g.find_entity_mentions("Which state borders Texas?") == ["Texas"]
