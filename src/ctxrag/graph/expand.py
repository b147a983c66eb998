"""Subgraph expansion over the sparse entity-relation incidence matrix ``M`` (entities x relations, 1 where an entity is
the subject or object of a relation), as in Milvus's Graph RAG method.

Degree-1 adjacency comes from one product (entity-entity ``M @ M.T``, relation-relation ``M.T @ M``: two relations
are adjacent when they share an entity), degree n from its n-th power. Expansion from seed entities and seed
relations gives the candidate relations for reranking:

- from seed entities: rows of ``A_E^n @ M`` (relations touching entities within n steps of a seed),
- from seed relations: rows of ``A_R^n`` (relations within n shared-entity steps of a seed relation).

`expand_relations` computes those rows as sparse vector-matrix products, which equal the matrix powers' rows without
materialising a possibly dense ``A^n`` for a large graph.

Example::

    import numpy as np, scipy.sparse as sp
    M = sp.csr_matrix(np.array([[1, 0], [1, 1], [0, 1]]))     # e0-r0-e1-r1-e2
    relation_adjacency(M, 1).toarray()                          # [[1, 1], [1, 1]]
    expand_relations(M, entity_ids=[0], relation_ids=[], degree=1)  # {0, 1}
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp


def _check_degree(degree: int) -> None:
    if not isinstance(degree, (int, np.integer)) or isinstance(degree, bool) or degree < 1:
        raise ValueError(f"degree must be an integer >= 1, got {degree!r}")


def _binary(m: sp.spmatrix) -> sp.csr_matrix:
    out = sp.csr_matrix(m, dtype=np.float32, copy=True)
    out.data[:] = 1.0
    out.eliminate_zeros()
    return out


def _power(a: sp.csr_matrix, degree: int) -> sp.csr_matrix:
    out = a
    for _ in range(degree - 1):
        out = _binary(out @ a)  # keep 0/1 so counts never overflow
    return out


def entity_adjacency(incidence: sp.spmatrix, degree: int = 1) -> sp.csr_matrix:
    """Entity-entity adjacency of degree `degree` (0/1, diagonal included): ``(M @ M.T)^degree``."""
    _check_degree(degree)
    m = _binary(incidence)
    return _power(_binary(m @ m.T), degree)


def relation_adjacency(incidence: sp.spmatrix, degree: int = 1) -> sp.csr_matrix:
    """Relation-relation adjacency of degree `degree` (0/1, diagonal included): ``(M.T @ M)^degree``."""
    _check_degree(degree)
    m = _binary(incidence)
    return _power(_binary(m.T @ m), degree)


def _indicator(ids: Iterable[int], size: int, what: str) -> sp.csr_matrix:
    idx = np.asarray(sorted({int(i) for i in ids}), dtype=np.int64)
    if idx.size and (idx[0] < 0 or idx[-1] >= size):
        bad = idx[0] if idx[0] < 0 else idx[-1]
        raise IndexError(f"{what} id {bad} out of range for a graph with {size} {what}s")
    return sp.csr_matrix((np.ones(idx.size, dtype=np.float32), (np.zeros(idx.size, dtype=np.int64), idx)), shape=(1, size))


def expand_relations(
    incidence: sp.spmatrix, entity_ids: Iterable[int], relation_ids: Iterable[int], degree: int = 1
) -> set[int]:
    """Candidate relations: those reached within `degree` steps from the seed entities and seed relations.

    Equals the union of the nonzero columns of ``(entity_adjacency(M, degree) @ M)[entity_ids]`` and
    ``relation_adjacency(M, degree)[relation_ids]``.
    """
    _check_degree(degree)
    m = _binary(incidence)
    n_entities, n_relations = m.shape
    mt = m.T.tocsr()
    found: set[int] = set()

    e = _indicator(entity_ids, n_entities, "entity")
    if e.nnz:
        for _ in range(degree):  # e <- e @ (M M^T)
            e = _binary((e @ m) @ mt)
        found.update(int(i) for i in (e @ m).indices)

    r = _indicator(relation_ids, n_relations, "relation")
    if r.nnz:
        for _ in range(degree):  # r <- r @ (M^T M)
            r = _binary((r @ mt) @ m)
        found.update(int(i) for i in r.indices)
    return found
