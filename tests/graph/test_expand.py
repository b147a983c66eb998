from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ctxrag.graph.expand import entity_adjacency, expand_relations, relation_adjacency

# a chain e0 -r0- e1 -r1- e2 -r2- e3 -r3- e4, and an island e5 -r4- e6
_EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (5, 6)]


def _incidence() -> sp.csr_matrix:
    m = np.zeros((7, len(_EDGES)), dtype=np.float32)
    for r, (a, b) in enumerate(_EDGES):
        m[a, r] = m[b, r] = 1
    return sp.csr_matrix(m)


def test_degree_one_adjacency() -> None:
    m = _incidence()
    ra = relation_adjacency(m, 1).toarray()
    assert ra[0].nonzero()[0].tolist() == [0, 1]
    assert ra[1].nonzero()[0].tolist() == [0, 1, 2]
    assert ra[4].nonzero()[0].tolist() == [4]
    ea = entity_adjacency(m, 1).toarray()
    assert ea[2].nonzero()[0].tolist() == [1, 2, 3]


def test_degree_two_is_the_square() -> None:
    m = _incidence()
    assert relation_adjacency(m, 2).toarray()[0].nonzero()[0].tolist() == [0, 1, 2]
    assert entity_adjacency(m, 2).toarray()[0].nonzero()[0].tolist() == [0, 1, 2]
    assert set(relation_adjacency(m, 2).data) == {1.0}


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_expand_equals_matrix_rows(degree: int) -> None:
    m = _incidence()
    for ents, rels in [([0], []), ([], [0]), ([2], [4]), ([0, 5], [3])]:
        want: set[int] = set()
        er = (entity_adjacency(m, degree) @ m).toarray()
        ra = relation_adjacency(m, degree).toarray()
        for e in ents:
            want |= set(er[e].nonzero()[0].tolist())
        for r in rels:
            want |= set(ra[r].nonzero()[0].tolist())
        assert expand_relations(m, ents, rels, degree) == want


def test_expand_from_nothing_is_empty_and_bad_input_raises() -> None:
    m = _incidence()
    assert expand_relations(m, [], [], 1) == set()
    assert expand_relations(m, [0], [], 1) == {0, 1}
    with pytest.raises(ValueError, match="degree"):
        expand_relations(m, [0], [], 0)
    with pytest.raises(ValueError, match="degree"):
        relation_adjacency(m, True)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="entity id 9"):
        expand_relations(m, [9], [], 1)
    with pytest.raises(IndexError, match="relation id -1"):
        expand_relations(m, [], [-1], 1)
