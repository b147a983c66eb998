"""Graph RAG algorithms: triplet extraction and import, subgraph expansion and Personalized PageRank over the
knowledge graph index (`ctxrag.stores.graph.GraphIndex`, where the index and its vocabulary live).

Example::

    from ctxrag.graph import TripletExtractor, entity_key
    entity_key("leonhard  Euler")   # 'leonhard euler'
"""
from __future__ import annotations

from ctxrag.graph.expand import entity_adjacency, expand_relations, relation_adjacency
from ctxrag.graph.triplets import (
    TripletExtractor,
    load_openie_file,
    load_triplets_json,
    parse_triplets,
)
from ctxrag.stores.graph import (
    TRIPLETS_KEY,
    Triplet,
    clean_text,
    coerce_triplets,
    entity_key,
    relation_key,
    relation_text,
)

__all__ = [
    "TRIPLETS_KEY",
    "Triplet",
    "TripletExtractor",
    "clean_text",
    "coerce_triplets",
    "entity_adjacency",
    "entity_key",
    "expand_relations",
    "load_openie_file",
    "load_triplets_json",
    "parse_triplets",
    "relation_adjacency",
    "relation_key",
    "relation_text",
]
