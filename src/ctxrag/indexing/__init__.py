"""Indexing stages: contextual retrieval (an LLM context per chunk), its cache and placement."""
from __future__ import annotations

from ctxrag.indexing.context_cache import ContextCache
from ctxrag.indexing.contextualizer import ContextReport, Contextualizer, clean_context, fallback_header
from ctxrag.indexing.placement import (
    ContextPlacement,
    apply_context,
    load_precomputed_contexts,
    text_to_index,
)
from ctxrag.indexing.windowing import window_document

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
