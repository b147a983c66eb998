"""Rerankers, filters and reordering: `BaseDocumentCompressor`s that run after retrieval.

Example::

    from ctxrag.compressors import build_reranker, LongContextReorder
    reranker = build_reranker("jina")
"""
from __future__ import annotations

from ctxrag.compressors.factory import Reranker, build_reranker
from ctxrag.compressors.filters import EmbeddingsThresholdFilter, LLMExtractor, LLMFilter, RedundantChunkFilter
from ctxrag.compressors.jina import JinaReranker
from ctxrag.compressors.llm_rerank import LLMReranker, PointwiseScoring, RerankMode
from ctxrag.compressors.reorder import LongContextReorder

__all__ = [
    "EmbeddingsThresholdFilter",
    "JinaReranker",
    "LLMExtractor",
    "LLMFilter",
    "LLMReranker",
    "LongContextReorder",
    "PointwiseScoring",
    "RedundantChunkFilter",
    "RerankMode",
    "Reranker",
    "build_reranker",
]
