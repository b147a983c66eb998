"""The knowledge graph index of Graph RAG: `GraphIndex` (entities, relations, passages, embeddings, incidence matrix),
its records, persistence and vocabulary (`Triplet`, `entity_key`). Algorithms over it (expansion, PageRank) and
triplet extraction live in `ctxrag.graph`.

Example::

    from ctxrag.stores.graph import GraphIndex, Triplet
    g = GraphIndex(make_embeddings())
    g.add_passages([("p1", "Euler studied under Johann Bernoulli.", [Triplet("Euler", "student of", "Johann Bernoulli")])])
"""
from __future__ import annotations

from ctxrag.stores.graph.index import TRIPLETS_KEY, GraphIndex
from ctxrag.stores.graph.normalize import clean_text, entity_key, relation_key, relation_text
from ctxrag.stores.graph.triplet import Triplet, coerce_triplet, coerce_triplets

__all__ = [
    "TRIPLETS_KEY",
    "GraphIndex",
    "Triplet",
    "clean_text",
    "coerce_triplet",
    "coerce_triplets",
    "entity_key",
    "relation_key",
    "relation_text",
]
