"""Personalized PageRank over entities and passages (HippoRAG 2's graph search, on a `GraphIndex`).

The walk graph has one node per entity and one per passage (entities first), undirected, with three kinds of edge:

- entity - entity: a relation links its subject and object (weight = number of such relations),
- entity - passage: the entity occurs in a triplet of the passage (weight 1),
- entity - entity synonymy: each entity's `synonym_top_k` nearest entities by embedding cosine, where the cosine is
  at least `synonym_threshold` (weight = the cosine; exact FAISS search), so "J. Bernoulli" and "Johann Bernoulli"
  share mass.

A query puts reset ("teleport") weight on seed entities and seed passages; `personalized_pagerank` spreads it, and the
passage nodes' stationary probabilities rank the passages. `seed_weights` builds the reset vector the way HippoRAG 2
does (fact-linked entities weighted by fact score over the entity's passage count; dense passage scores times a small
passage weight), plus exact question-entity matches and entities of ranked relation chains.

Example::

    from ctxrag.graph.ppr import PassageGraph, personalized_pagerank
    pg = PassageGraph.build(graph_index)                     # cached on the index until it changes
    reset = pg.seed_weights(entities={3: 1.0}, passages={"p7": 0.05})
    scores = pg.passage_scores(personalized_pagerank(pg.transition, reset, damping=0.5))
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from ctxrag.stores.graph import GraphIndex


def synonym_edges(vectors: np.ndarray, threshold: float = 0.8, top_k: int = 10) -> sp.csr_matrix:
    """Symmetric sparse matrix of each row's `top_k` most similar other rows with cosine >= `threshold` (value = the
    cosine). `vectors` are unit rows; exact search with a flat FAISS inner-product index (faster than blocked numpy
    matrix products, with no n x n matrix in memory)."""
    import faiss

    n = int(vectors.shape[0])
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if n < 2:
        return sp.csr_matrix((n, n), dtype=np.float32)
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    k = min(top_k, n - 1)
    index = faiss.IndexFlatIP(v.shape[1])
    index.add(v)
    sims, nbrs = index.search(v, k + 1)
    rows = np.repeat(np.arange(n), k + 1).reshape(n, k + 1)
    keep = (nbrs != rows) & (nbrs >= 0)
    keep &= np.cumsum(keep, axis=1) <= k  # k others per row, whether or not the row itself came back
    keep &= sims >= threshold
    m = sp.csr_matrix((sims[keep], (rows[keep], nbrs[keep])), shape=(n, n), dtype=np.float32)
    return m.maximum(m.T).tocsr()


def personalized_pagerank(
    transition_t: sp.csr_matrix,
    reset: np.ndarray,
    *,
    damping: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
) -> np.ndarray:
    """Stationary distribution of a walk that follows an edge with probability `damping` and jumps to the `reset`
    distribution otherwise. `transition_t` is the transposed row-stochastic transition matrix (rows of dangling nodes
    all zero: their mass jumps by `reset`, as networkx does). Power iteration until the L1 change is below `tol`."""
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping}")
    r = np.asarray(reset, dtype=np.float64)
    if r.shape != (transition_t.shape[0],):
        raise ValueError(f"reset has shape {r.shape}; the graph has {transition_t.shape[0]} nodes")
    if (r < 0).any() or not np.isfinite(r).all():
        raise ValueError("reset weights must be finite and >= 0")
    total = r.sum()
    if total <= 0:
        raise ValueError("reset weights are all zero: give at least one seed entity or passage")
    r = r / total
    dangling = np.asarray(transition_t.sum(axis=0)).ravel() == 0
    x = r.copy()
    for _ in range(max_iter):
        walked = transition_t @ x + x[dangling].sum() * r
        new = (1.0 - damping) * r + damping * walked
        if np.abs(new - x).sum() < tol:
            return new
        x = new
    return x


@dataclass
class PassageGraph:
    """The entity + passage walk graph of a `GraphIndex` (see the module docstring); build with `build`."""

    transition: sp.csr_matrix
    """Transposed row-stochastic transition matrix over ``n_entities + len(passage_ids)`` nodes."""
    n_entities: int
    passage_ids: list[str]
    entity_passage_counts: np.ndarray
    """Passages each entity occurs in (HippoRAG's node specificity divisor)."""

    @classmethod
    def build(
        cls, graph: GraphIndex, *, synonym_threshold: float = 0.8, synonym_top_k: int = 10
    ) -> PassageGraph:
        """Build the walk graph, or return the one cached on `graph` for these settings (dropped on any change)."""
        key = ("passage-graph", float(synonym_threshold), int(synonym_top_k))
        cached = graph.derived.get(key)
        if cached is not None:
            return cached
        n_e = graph.n_entities
        pids = graph.passage_ids
        rows: list[int] = []
        cols: list[int] = []
        for col, pid in enumerate(pids):
            ents = {e for rid in graph.passage_relations(pid) for e in graph.relation_entities(rid)}
            rows += sorted(ents)
            cols += [col] * len(ents)
        ep = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(n_e, len(pids)))
        m = graph.incidence
        ee = (m @ m.T).tocsr()  # off-diagonal: relations linking two entities
        ee.setdiag(0)
        ee.eliminate_zeros()
        if n_e > 1 and graph.entity_vectors.shape[0] == n_e:
            ee = ee + synonym_edges(graph.entity_vectors, synonym_threshold, synonym_top_k)
        adjacency = sp.bmat([[ee, ep], [ep.T, None]], format="csr", dtype=np.float64)
        degree = np.asarray(adjacency.sum(axis=1)).ravel()
        inv = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
        out = cls(
            transition=(sp.diags(inv) @ adjacency).T.tocsr(),
            n_entities=n_e,
            passage_ids=pids,
            entity_passage_counts=np.asarray(ep.sum(axis=1)).ravel(),
        )
        graph.derived[key] = out
        return out

    @property
    def n_nodes(self) -> int:
        return self.n_entities + len(self.passage_ids)

    def seed_weights(self, entities: Mapping[int, float], passages: Mapping[str, float]) -> np.ndarray:
        """Reset vector from entity-id and passage-id weights (unknown passage ids are ignored)."""
        reset = np.zeros(self.n_nodes, dtype=np.float64)
        for e, w in entities.items():
            if not 0 <= e < self.n_entities:
                raise IndexError(f"entity id {e} out of range for a graph with {self.n_entities} entities")
            reset[e] = max(reset[e], float(w))
        index = {pid: i for i, pid in enumerate(self.passage_ids)}
        for pid, w in passages.items():
            if pid in index:
                reset[self.n_entities + index[pid]] = max(reset[self.n_entities + index[pid]], float(w))
        return reset

    def passage_scores(self, stationary: np.ndarray) -> dict[str, float]:
        """Passage id -> stationary probability."""
        return dict(zip(self.passage_ids, stationary[self.n_entities :].tolist()))
