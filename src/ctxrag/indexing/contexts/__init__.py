"""Contextual retrieval: a short context for each chunk, written by an LLM (or a header), cached and fail-safe.

One stage of the pipeline (split -> contextualize -> index), one concept per module:

- `strategies`: the strategies by name (``chunk``, ``document``, ``header``, ``auto`` ...) and `make_contextualizer`.
- `chunk_context`: `Contextualizer`, one context per chunk (Anthropic's prompt); `document_context`:
  `DocumentContextualizer`, one per document. Each plans its requests (`plan`) and hands them to a
- `writer`: `ContextWriter`, which asks the model (retries: `retry`; model facts: `model_info`), falls back to the
  header (`text`), fills the cache (`cache`) and keeps the running report (`report`).
- `windowing`: a document too long for the model's window, cut around the chunk (or to its beginning).

Example::

    from ctxrag.indexing.contexts import make_contextualizer
    ctx = make_contextualizer("document+header")
    contexts = ctx.contextualize_document(text, chunk_texts, title="guide.md", heading_paths=paths)
"""
from __future__ import annotations

from ctxrag.indexing.contexts.cache import ContextCache
from ctxrag.indexing.contexts.chunk_context import Contextualizer
from ctxrag.indexing.contexts.document_context import DocumentContextualizer
from ctxrag.indexing.contexts.report import ContextReport
from ctxrag.indexing.contexts.strategies import ChunkContextualizer, ContextStrategy, make_contextualizer
from ctxrag.indexing.contexts.text import clean_context, fallback_header
from ctxrag.indexing.contexts.windowing import window_document
from ctxrag.indexing.contexts.writer import ContextWriter

__all__ = [
    "ChunkContextualizer",
    "ContextCache",
    "ContextReport",
    "ContextStrategy",
    "ContextWriter",
    "Contextualizer",
    "DocumentContextualizer",
    "clean_context",
    "fallback_header",
    "make_contextualizer",
    "window_document",
]
