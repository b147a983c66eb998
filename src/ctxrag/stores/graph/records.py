"""The records a `GraphIndex` keeps (a relation, a passage), the whole graph as plain data (`GraphState`) and its
file format version, shared by the index and its persistence."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

FORMAT = "ctxrag-graph"
VERSION = 1


@dataclass
class Relation:
    key: str
    text: str
    subject: int
    object: int
    passages: list[str] = field(default_factory=list)


@dataclass
class Passage:
    text: str
    relations: list[int]
    metadata: dict[str, Any]


@dataclass
class GraphState:
    """A graph as plain data: what `GraphIndex.state` hands out, `GraphIndex.from_state` takes, and
    `ctxrag.stores.graph.persistence` writes and reads."""

    entity_keys: list[str]
    entity_names: list[str]
    relations: list[Relation]
    passages: dict[str, Passage]
    entity_vectors: np.ndarray
    relation_vectors: np.ndarray

    def incidence(self) -> sp.csr_matrix:
        """Entity-relation incidence matrix (entities x relations, float32 0/1)."""
        rows = [r.subject for r in self.relations] + [r.object for r in self.relations]
        cols = list(range(len(self.relations))) * 2
        m = sp.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)),
                          shape=(len(self.entity_keys), len(self.relations)))
        m.data[:] = 1.0  # a self-loop (subject == object) counts once
        return m
