"""Build the retriever a user asks for by mode (`ctxrag.retrievers.modes.MODES`: dense, bm25, hybrid, graph,
milvus_hybrid), with optional rerank, compression and reorder.

Example::

    from ctxrag import KnowledgeBase
    kb = KnowledgeBase.open("demo")
    r = kb.as_retriever(mode="hybrid", k=5, rerank="llm", reorder=True)
    r.invoke("星河知识库支持哪些文件格式？")
    kb.as_retriever(search_kwargs={"k": 2, "filter": {"file_type": "markdown"}})   # LangChain's FAISS spelling

Every retriever built here takes ``k`` and ``filter`` per call too (`ctxrag.retrievers.base`). The knowledge base
is only read for its pieces (`ctxrag.stores.protocols.KnowledgeSource`): each retriever gets an index, the chunk
lookup and, where it embeds, the embedding model, never the knowledge base itself.
"""
from __future__ import annotations

from typing import Any, Sequence

from langchain_core.documents import BaseDocumentCompressor
from langchain_core.retrievers import BaseRetriever

from ctxrag.enums import Reranker, SearchMode
from ctxrag.errors import ConfigError
from ctxrag.retrievers.base import call_arguments
from ctxrag.retrievers.fusion import FusionRetriever
from ctxrag.retrievers.modes import (  # noqa: F401 - the pieces' builders, importable from here as before
    DEFAULT_MODE, ModeOptions, bm25_retriever, dense_retriever, fusion_retriever, mode_row,
)
from ctxrag.stores.protocols import KnowledgeSource

_SEARCH_KWARGS = frozenset({"k", "filter", "fetch_k", "lambda_mult", "score_threshold"})
RERANK_POOL = {Reranker.JINA: 150, Reranker.LLM: 20}
"""Default pool sizes handed to a reranker: Anthropic's recipe reranks 150, but an LLM reranker on a small local
model costs seconds per chunk, so it reranks 20 unless told otherwise."""


def make_retriever(
    kb: KnowledgeSource,
    mode: SearchMode | str = DEFAULT_MODE,
    k: int = 10,
    *,
    filter: Any = None,
    search_type: str = "similarity",
    search_kwargs: dict[str, Any] | None = None,
    fetch_k: int | None = None,
    lambda_mult: float = 0.5,
    score_threshold: float | None = None,
    weights: Sequence[float] | None = None,
    fusion: str = "auto",
    c: float = 60,
    document_weight: float | None = None,
    rerank: Reranker | str | BaseDocumentCompressor = Reranker.NONE,
    rerank_pool: int | None = None,
    compressors: Sequence[Any] = (),
    reorder: bool = False,
) -> BaseRetriever:
    """A retriever over knowledge base `kb` (see the module docstring); `k` is the number of chunks returned.

    ``search_kwargs`` (``k``, ``filter``, ``fetch_k``, ``lambda_mult``, ``score_threshold``) is LangChain's
    `VectorStore.as_retriever` spelling of the same options; its values win over the keyword arguments.

    Hybrid fusion: ``fusion="auto"`` (default) takes mode, weights and c per query language from
    `ctxrag.retrievers.fusion.LANGUAGE_DEFAULTS` (Chinese and English differ); a named mode (``"rrf"``,
    ``"relative_score"``, ``"dbsf"``) uses `weights` (default 0.5/0.5, as [dense, bm25]) and `c` as given.

    Mode ``document``: `document_weight` weighs each chunk's document rank against its own (default
    `ctxrag.retrievers.modes.DOCUMENT_WEIGHT`; `ctxrag.retrievers.document_rank`).
    """
    if search_kwargs:
        given = call_arguments("as_retriever", {"search_kwargs": search_kwargs}, _SEARCH_KWARGS)
        k = given.get("k", k)
        filter = given.get("filter", filter)
        fetch_k = given.get("fetch_k", fetch_k)
        lambda_mult = given.get("lambda_mult", lambda_mult)
        score_threshold = given.get("score_threshold", score_threshold)
    row = mode_row(mode)
    if k <= 0:
        raise ConfigError(f"k must be positive, got {k}")
    if document_weight is not None and not (document_weight >= 0 and document_weight != float("inf")):
        raise ConfigError(f"document_weight must be a finite number >= 0, got {document_weight!r}")
    reranker = _reranker(rerank, kb)
    staged = reranker is not None or bool(compressors) or reorder
    pool = k
    if reranker is not None:
        pool = rerank_pool or RERANK_POOL.get(rerank if isinstance(rerank, str) else "", 50)
        pool = max(pool, k)
    base = row.build(kb, ModeOptions(pool, filter, search_type, fetch_k, lambda_mult, score_threshold, weights,
                                     fusion, c, document_weight))
    if not staged:
        return base
    from ctxrag.retrievers.pipeline import RetrievalPipeline

    return RetrievalPipeline(
        base_retriever=base, fetch_k=pool, reranker=reranker, k=k, filter=filter, compressors=list(compressors),
        reorder=reorder, name=f"{row.mode.value}-pipeline",
    )


def _reranker(rerank: Reranker | str | BaseDocumentCompressor | None, kb: KnowledgeSource) -> Any:
    if not isinstance(rerank, str):
        return rerank  # None, or a BaseDocumentCompressor given directly
    if Reranker.from_str(rerank) is Reranker.NONE:
        return None
    from ctxrag.compressors import build_reranker  # imported on use: the rerankers pull in HTTP and chat clients

    return build_reranker(rerank, kb.settings)


def make_multi_kb_retriever(kbs: Sequence[KnowledgeSource], mode: SearchMode | str = DEFAULT_MODE, k: int = 10, **kwargs: Any) -> BaseRetriever:
    """Query several knowledge bases together (e.g. a project one and the shared `general` one), fused by RRF."""
    if not kbs:
        raise ConfigError("no knowledge base given")
    if len(kbs) == 1:
        return make_retriever(kbs[0], mode=mode, k=k, **kwargs)
    parts = [make_retriever(kb, mode=mode, k=k, **kwargs) for kb in kbs]
    for kb, p in zip(kbs, parts):
        p.name = f"kb:{kb.name}"
    return FusionRetriever(retrievers=parts, mode="rrf", k=k, name="multi-kb")
