"""Indexing stages: the ingest pipeline (`ctxrag.indexing.pipeline`), splitting into chunk records
(`ctxrag.indexing.chunking`), contextual retrieval (an LLM context per chunk), its cache and placement."""
from __future__ import annotations

from ctxrag.indexing.context_cache import ContextCache
from ctxrag.indexing.context_report import ContextReport
from ctxrag.indexing.context_text import clean_context, fallback_header
from ctxrag.indexing.contextualizer import Contextualizer
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
