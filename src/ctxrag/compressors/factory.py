"""Rerankers from settings, for the knowledge base, CLI and server (none of which should know reranker classes).

Example::

    from ctxrag.compressors.factory import build_reranker
    reranker = build_reranker("jina")          # settings.rerank: base_url, model, api_key, timeout, top_n
    build_reranker(Reranker.NONE)              # None: keep the fused order
"""
from __future__ import annotations

from langchain_core.documents import BaseDocumentCompressor

from ctxrag.enums import Reranker
from ctxrag.compressors.jina import JinaReranker, missing_key_problem
from ctxrag.compressors.llm_rerank import LLMReranker
from ctxrag.errors import ConfigError
from ctxrag.models import chat
from ctxrag.settings import Settings, get_settings


def build_reranker(kind: Reranker | str, settings: Settings | None = None) -> BaseDocumentCompressor | None:
    """``"none"`` -> None, ``"jina"`` -> `JinaReranker`, ``"llm"`` -> `LLMReranker` over ``make_chat_model``.

    Raises `ConfigError` naming the bad kind.
    """
    settings = settings or get_settings()
    rerank = settings.rerank
    name = Reranker.from_str(kind)
    if name is Reranker.NONE:
        return None
    if name is Reranker.JINA:
        problem = missing_key_problem(rerank.base_url, rerank.api_key)
        if problem:
            raise ConfigError(problem)
        return JinaReranker(
            base_url=rerank.base_url,
            model=rerank.model,
            api_key=rerank.api_key,
            timeout=rerank.timeout,
            top_n=rerank.top_n,
        )
    return LLMReranker(llm=chat.make_chat_model(settings), top_n=rerank.top_n, language=settings.language)
