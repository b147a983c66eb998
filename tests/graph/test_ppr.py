"""Personalized PageRank and the entity + passage walk graph: checked against networkx and brute force."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from ctxrag.stores.graph import GraphIndex
from ctxrag.graph.ppr import PassageGraph, personalized_pagerank, synonym_edges


def _transition_t(adjacency: sp.csr_matrix) -> sp.csr_matrix:
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    inv = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    return (sp.diags(inv) @ adjacency).T.tocsr()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_matches_networkx_pagerank(seed: int, damping: float) -> None:
    """Weighted directed graph with dangling nodes and a sparse personalization: same vector as networkx."""
    rng = np.random.default_rng(seed)
    n = 40
    dense = rng.random((n, n)) * (rng.random((n, n)) < 0.08)
    dense[:5] = 0.0  # five dangling nodes
    np.fill_diagonal(dense, 0.0)
    reset = np.zeros(n)
    reset[rng.choice(n, 4, replace=False)] = rng.random(4) + 0.1
    ours = personalized_pagerank(_transition_t(sp.csr_matrix(dense)), reset, damping=damping, tol=1e-12, max_iter=500)

    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_weighted_edges_from((i, j, dense[i, j]) for i, j in zip(*np.nonzero(dense)))
    ref = nx.pagerank(g, alpha=damping, personalization={i: reset[i] for i in range(n) if reset[i] > 0},
                      weight="weight", tol=1e-13, max_iter=1000)
    np.testing.assert_allclose(ours, [ref[i] for i in range(n)], atol=1e-9)
    assert ours.sum() == pytest.approx(1.0)


def test_pagerank_rejects_bad_input() -> None:
    t = _transition_t(sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]])))
    with pytest.raises(ValueError, match="damping must be in"):
        personalized_pagerank(t, np.array([1.0, 0.0]), damping=1.0)
    with pytest.raises(ValueError, match="all zero"):
        personalized_pagerank(t, np.zeros(2))
    with pytest.raises(ValueError, match="shape"):
        personalized_pagerank(t, np.ones(3))
    with pytest.raises(ValueError, match=">= 0"):
        personalized_pagerank(t, np.array([1.0, -0.5]))


def _brute_synonyms(v: np.ndarray, threshold: float, top_k: int) -> np.ndarray:
    sims = v @ v.T
    np.fill_diagonal(sims, -np.inf)
    out = np.zeros_like(sims)
    for i in range(len(v)):
        for j in np.argsort(-sims[i], kind="stable")[:top_k]:
            if sims[i, j] >= threshold:
                out[i, j] = sims[i, j]
    return np.maximum(out, out.T)


@pytest.mark.parametrize("top_k", [1, 4, 59, 100])
def test_synonym_edges_equal_brute_force(top_k: int) -> None:
    rng = np.random.default_rng(3)
    v = rng.normal(size=(60, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    got = synonym_edges(v, threshold=0.3, top_k=top_k)
    np.testing.assert_allclose(got.toarray(), _brute_synonyms(v, 0.3, top_k), atol=1e-5)
    assert (got != got.T).nnz == 0 and got.diagonal().sum() == 0


def test_synonym_edges_small_inputs() -> None:
    assert synonym_edges(np.zeros((0, 4), dtype=np.float32)).shape == (0, 0)
    assert synonym_edges(np.ones((1, 4), dtype=np.float32) / 2).nnz == 0
    with pytest.raises(ValueError, match="top_k"):
        synonym_edges(np.eye(3, dtype=np.float32), top_k=0)


def test_passage_graph_structure(bernoulli_graph: GraphIndex) -> None:
    g = bernoulli_graph
    pg = PassageGraph.build(g, synonym_threshold=2.0)  # no synonym edges: only triplet structure
    assert pg.n_nodes == g.n_entities + len(g) and pg.passage_ids == g.passage_ids
    # column-stochastic transposed transition (every node here has an edge)
    np.testing.assert_allclose(np.asarray(pg.transition.sum(axis=0)).ravel(), 1.0, rtol=1e-9)
    johann = g.entity_id("Johann Bernoulli")
    # Johann appears in the triplets of jakob, johann, daniel and euler passages
    assert pg.entity_passage_counts[johann] == 4
    daniel_node = g.n_entities + pg.passage_ids.index("daniel")
    # a walk from the Daniel passage goes only to entities of its triplets
    targets = {int(i) for i in pg.transition[:, daniel_node].nonzero()[0]}
    names = {g.entity_name(i) for i in targets}
    assert "Daniel Bernoulli" in names and "Johann Bernoulli" in names and "Leonhard Euler" not in names
    assert all(t < g.n_entities for t in targets)


def test_passage_graph_is_cached_until_the_index_changes(e5, bernoulli_items) -> None:  # noqa: ANN001
    g = GraphIndex(e5, show_progress=False)
    g.add_passages(bernoulli_items[:3])
    first = PassageGraph.build(g)
    assert PassageGraph.build(g) is first
    assert PassageGraph.build(g, synonym_threshold=0.9) is not first  # other settings, other graph
    g.add_passages(bernoulli_items[3:])
    second = PassageGraph.build(g)
    assert second is not first and len(second.passage_ids) == 4
    g.delete_passages(["daniel"])
    third = PassageGraph.build(g)
    assert "daniel" not in third.passage_ids and third.n_entities == g.n_entities


def test_seed_weights(bernoulli_graph: GraphIndex) -> None:
    pg = PassageGraph.build(bernoulli_graph)
    reset = pg.seed_weights({0: 0.5}, {"daniel": 0.2, "not-in-graph": 9.0})
    assert reset[0] == 0.5 and reset[pg.n_entities + pg.passage_ids.index("daniel")] == 0.2
    assert reset.sum() == pytest.approx(0.7)
    with pytest.raises(IndexError, match="entity id 999"):
        pg.seed_weights({999: 1.0}, {})


def test_walk_from_euler_reaches_daniel_through_johann(bernoulli_graph: GraphIndex) -> None:
    """Seeding only the entity Leonhard Euler, the passage about Daniel (which never names Euler) outranks the
    passage about Jakob: mass flows Euler -> Johann -> Daniel Bernoulli -> Daniel's passage."""
    g = bernoulli_graph
    pg = PassageGraph.build(g, synonym_threshold=2.0)
    reset = pg.seed_weights({g.entity_id("Leonhard Euler"): 1.0}, {})
    scores = pg.passage_scores(personalized_pagerank(pg.transition, reset, damping=0.5))
    assert max(scores, key=scores.get) in {"euler", "johann"}
    assert scores["daniel"] > 0 and scores["johann"] > scores["jakob"]


def test_synonym_edges_with_duplicate_vectors() -> None:
    """Identical vectors (the row itself may not come back first): never a self edge, k others per row."""
    v = np.tile(np.array([[1.0, 0.0, 0.0]], dtype=np.float32), (5, 1))
    got = synonym_edges(v, threshold=0.5, top_k=2)
    assert got.diagonal().sum() == 0
    assert (np.asarray((got > 0).sum(axis=1)).ravel() >= 2).all()
