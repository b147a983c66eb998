"""Indexing stages: the ingest pipeline (`ctxrag.indexing.pipeline`), splitting into chunk records
(`ctxrag.indexing.chunking`), contextual retrieval (`ctxrag.indexing.contexts`: a context per chunk, its cache),
where the context goes in the indexed text (`ctxrag.indexing.placement`), and bulk import of precomputed vectors."""
from __future__ import annotations

from ctxrag.indexing.contexts import (
    ContextCache,
    ContextReport,
    Contextualizer,
    clean_context,
    fallback_header,
    window_document,
)
from ctxrag.indexing.placement import (
    ContextPlacement,
    apply_context,
    load_precomputed_contexts,
    text_to_index,
)

__all__ = [
    "ContextCache",
    "ContextPlacement",
    "ContextReport",
    "Contextualizer",
    "apply_context",
    "clean_context",
    "fallback_header",
    "load_precomputed_contexts",
    "text_to_index",
    "window_document",
]
