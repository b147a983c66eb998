"""Build the retriever a user asks for by name: dense, bm25, hybrid or graph, with optional rerank, compression and reorder.

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

import logging
from typing import Any, Sequence

from langchain_core.documents import BaseDocumentCompressor
from langchain_core.retrievers import BaseRetriever

from ctxrag.enums import Reranker, SearchMode
from ctxrag.errors import ConfigError
from ctxrag.retrievers.base import call_arguments
from ctxrag.retrievers.fusion import LANGUAGE_DEFAULTS, FusionRetriever
from ctxrag.retrievers.dense import DenseRetriever
from ctxrag.retrievers.kb_bm25 import KBBM25Retriever
from ctxrag.stores.protocols import KnowledgeSource

log = logging.getLogger(__name__)

_SEARCH_KWARGS = frozenset({"k", "filter", "fetch_k", "lambda_mult", "score_threshold"})
RERANK_POOL = {Reranker.JINA: 150, Reranker.LLM: 20}
"""Default pool sizes handed to a reranker: Anthropic's recipe reranks 150, but an LLM reranker on a small local
model costs seconds per chunk, so it reranks 20 unless told otherwise."""


def make_retriever(
    kb: KnowledgeSource,
    mode: SearchMode | str = SearchMode.HYBRID,
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
    """
    if search_kwargs:
        given = call_arguments("as_retriever", {"search_kwargs": search_kwargs}, _SEARCH_KWARGS)
        k = given.get("k", k)
        filter = given.get("filter", filter)
        fetch_k = given.get("fetch_k", fetch_k)
        lambda_mult = given.get("lambda_mult", lambda_mult)
        score_threshold = given.get("score_threshold", score_threshold)
    mode = SearchMode.from_str(mode)
    if k <= 0:
        raise ConfigError(f"k must be positive, got {k}")
    reranker = _reranker(rerank, kb)
    staged = reranker is not None or bool(compressors) or reorder
    pool = k
    if reranker is not None:
        pool = rerank_pool or RERANK_POOL.get(rerank if isinstance(rerank, str) else "", 50)
        pool = max(pool, k)
    base = _base(kb, mode, pool, filter, search_type, fetch_k, lambda_mult, score_threshold, weights, fusion, c)
    if not staged:
        return base
    from ctxrag.retrievers.pipeline import RetrievalPipeline

    return RetrievalPipeline(
        base_retriever=base, fetch_k=pool, reranker=reranker, k=k, filter=filter, compressors=list(compressors),
        reorder=reorder, name=f"{mode.value}-pipeline",
    )


def _reranker(rerank: Reranker | str | BaseDocumentCompressor | None, kb: KnowledgeSource) -> Any:
    if not isinstance(rerank, str):
        return rerank  # None, or a BaseDocumentCompressor given directly
    if Reranker.from_str(rerank) is Reranker.NONE:
        return None
    from ctxrag.compressors import build_reranker  # imported on use: the rerankers pull in HTTP and chat clients

    return build_reranker(rerank, kb.settings)


def _base(
    kb: KnowledgeSource, mode: SearchMode, k: int, filter: Any, search_type: str, fetch_k: int | None, lambda_mult: float,
    score_threshold: float | None, weights: Sequence[float] | None, fusion: str, c: float,
) -> BaseRetriever:
    def dense(kk: int) -> DenseRetriever:
        kwargs: dict[str, Any] = {"lambda_mult": lambda_mult}
        if fetch_k:
            kwargs["fetch_k"] = fetch_k
        if score_threshold is not None:
            kwargs["score_threshold"] = score_threshold
        return dense_retriever(kb, k=kk, filter=filter, search_type=search_type, search_kwargs=kwargs, name="dense")

    if mode is SearchMode.DENSE:
        return dense(k)
    if mode is SearchMode.GRAPH:
        from ctxrag.retrievers.graph import PPR_PASSAGE_SEEDS

        return _graph(kb, k, filter, dense(max(k, PPR_PASSAGE_SEEDS)))  # its top passages also seed the PageRank walk
    if mode is SearchMode.BM25:
        return bm25_retriever(kb, k=k, filter=filter, name="bm25")  # fills up to k with zero-score chunks
    bm25 = bm25_retriever(kb, k=k, filter=filter, fill=False, name="bm25")  # zero-score filler would add noise
    # each side contributes a deeper list than k so fusion has overlap to work with
    depth = max(k, 2 * k if k < 50 else k)
    return fusion_retriever([dense(depth), bm25.model_copy(update={"k": depth})], k=k, fusion=fusion,
                            weights=weights, c=c, filter=filter)


def fusion_retriever(retrievers: Sequence[BaseRetriever], *, k: int, fusion: str = "auto",
                     weights: Sequence[float] | None = None, c: float = 60, filter: Any = None,
                     name: str = "hybrid") -> FusionRetriever:
    """The hybrid stage over ranked `retrievers` ([dense, bm25]), as `make_retriever` and the evaluation build it.

    ``fusion="auto"`` without `weights` takes mode, weights and c per query language from `LANGUAGE_DEFAULTS`;
    otherwise `fusion` names the mode (``"rrf"``, ``"relative_score"``, ``"dbsf"``) and `weights` default to equal.

    Example: ``fusion_retriever([dense, bm25], k=10)`` fuses by the query's language defaults.
    """
    parts = list(retrievers)
    auto = fusion == "auto"
    return FusionRetriever(
        retrievers=parts, weights=list(weights) if weights is not None else [1.0 / len(parts)] * len(parts),
        mode="rrf" if auto else fusion, c=c, k=k, filter=filter, name=name,
        by_language=dict(LANGUAGE_DEFAULTS) if auto and weights is None else None,
    )


def dense_retriever(kb: KnowledgeSource, **kwargs: Any) -> DenseRetriever:
    """A `DenseRetriever` over `kb`'s dense index (following its new generations), chunk lookup and embedding model;
    `kwargs` are the retriever's own fields (``k``, ``filter``, ``search_type``, ``search_kwargs``, ...)."""
    return DenseRetriever(index=kb.dense_index(), chunks=kb.chunks, embeddings=kb.embeddings, **kwargs)


def bm25_retriever(kb: KnowledgeSource, **kwargs: Any) -> KBBM25Retriever:
    """A `KBBM25Retriever` over `kb`'s BM25 index (following its new generations) and chunk lookup; `kwargs` are the
    retriever's own fields (``k``, ``filter``, ``fill``, ...)."""
    return KBBM25Retriever(index=kb.keyword_index(), chunks=kb.chunks, **kwargs)


def _graph(kb: KnowledgeSource, k: int, filter: Any, fallback: BaseRetriever) -> BaseRetriever:
    """Graph RAG over the knowledge base's ``graph`` index (entity/relation graph built at ingest), ranked as
    ``settings.graph_rerank`` says (default Personalized PageRank, the best measured:
    docs/benchmarks/graph_rag.md); dense retrieval gives the PageRank passage seeds and fills up."""
    graph = kb.graph_index()
    if graph is None:
        raise ConfigError(
            f"knowledge base {kb.name!r} has no graph index; set CTXRAG_GRAPH=true before ingesting "
            "(triplets are extracted by the chat model) or use --mode dense/bm25/hybrid"
        )
    from ctxrag.retrievers.graph import GraphRetriever

    how = kb.settings.graph_rerank
    llm = None
    if how == "llm":
        from ctxrag.models import chat

        try:
            llm = chat.make_chat_model(kb.settings, max_tokens=300, temperature=0.0)
        except Exception as exc:  # noqa: BLE001 - no usable model: rank without one rather than fail the search
            log.warning("graph_rerank='llm' but no chat model (%s); ranking with 'ppr'", exc)
            how = "ppr"
    return GraphRetriever(graph_index=graph, embeddings=kb.embeddings, k=k, filter=filter, rerank=how, llm=llm,
                          fallback_retriever=fallback, chunks=kb.chunks, name="graph")


def make_multi_kb_retriever(kbs: Sequence[KnowledgeSource], mode: SearchMode | str = SearchMode.HYBRID, k: int = 10, **kwargs: Any) -> BaseRetriever:
    """Query several knowledge bases together (e.g. a project one and the shared `general` one), fused by RRF."""
    if not kbs:
        raise ConfigError("no knowledge base given")
    if len(kbs) == 1:
        return make_retriever(kbs[0], mode=mode, k=k, **kwargs)
    parts = [make_retriever(kb, mode=mode, k=k, **kwargs) for kb in kbs]
    for kb, p in zip(kbs, parts):
        p.name = f"kb:{kb.name}"
    return FusionRetriever(retrievers=parts, mode="rrf", k=k, name="multi-kb")
