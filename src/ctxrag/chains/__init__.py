"""Answer chains: the ask chain (`build_ask_chain`, output `RagAnswer`), basic RAG (with its relevance gate and the optional extractive short answer), the routing assistant, question rewriting, document summaries and articles from notes."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time `__getattr__` imports on first use
    from ctxrag.chains.article import ArticleWriter
    from ctxrag.chains.ask import RagAnswer, build_ask_chain
    from ctxrag.chains.assistant import Assistant, build_assistant_chain
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.chains.relevance import Relevance, RelevanceGate
    from ctxrag.chains.short_answer import ExtractiveAnswer
    from ctxrag.chains.rewrite import QuestionRewriter
    from ctxrag.chains.router import EmbeddingRouter, LLMRouter, Route, RouteDecision, RouterThresholds, make_router
    from ctxrag.chains.summarize import DocumentSummarizer

_EXPORTS = {
    "build_ask_chain": "ctxrag.chains.ask",
    "RagAnswer": "ctxrag.chains.ask",
    "build_rag_chain": "ctxrag.chains.rag",
    "ExtractiveAnswer": "ctxrag.chains.short_answer",
    "RelevanceGate": "ctxrag.chains.relevance",
    "Relevance": "ctxrag.chains.relevance",
    "Assistant": "ctxrag.chains.assistant",
    "build_assistant_chain": "ctxrag.chains.assistant",
    "Route": "ctxrag.chains.router",
    "RouteDecision": "ctxrag.chains.router",
    "RouterThresholds": "ctxrag.chains.router",
    "EmbeddingRouter": "ctxrag.chains.router",
    "LLMRouter": "ctxrag.chains.router",
    "make_router": "ctxrag.chains.router",
    "QuestionRewriter": "ctxrag.chains.rewrite",
    "DocumentSummarizer": "ctxrag.chains.summarize",
    "ArticleWriter": "ctxrag.chains.article",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # lazy: importing ctxrag.chains.citations must not load every chain
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ctxrag.chains' has no attribute {name!r}")
