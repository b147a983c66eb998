"""Graph RAG: triplets, the knowledge graph index and subgraph expansion (Milvus's Graph RAG method on our stores).

Example::

    from ctxrag.graph import GraphIndex, TripletExtractor, entity_key
    entity_key("leonhard  Euler")   # 'leonhard euler'
"""
from __future__ import annotations

from ctxrag.graph.expand import entity_adjacency, expand_relations, relation_adjacency
from ctxrag.graph.index import TRIPLETS_KEY, GraphIndex
from ctxrag.graph.normalize import clean_text, entity_key, relation_key, relation_text
from ctxrag.graph.triplets import (
    Triplet,
    TripletExtractor,
    coerce_triplets,
    load_openie_file,
    load_triplets_json,
    parse_triplets,
)

__all__ = [
    "TRIPLETS_KEY",
    "GraphIndex",
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
