"""The search modes as one table: for each `SearchMode`, its help text, the index kinds it reads and how its
retriever is built. The factory builds from it, the evaluation times the index kinds it lists, and the CLI and the
server take ``--mode`` as the enum with help generated from it.

Adding a mode is a `SearchMode` member, one `ModeRow` in `MODES` and its builder (a function
``(kb, options) -> BaseRetriever``); docs/architecture.md shows the real diff of one.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.enums import SearchMode
    from ctxrag.retrievers.modes import MODES, ModeOptions, mode_help
    kb = KnowledgeBase.open("demo")
    MODES[SearchMode.BM25].indexes                          # ('bm25',)
    MODES[SearchMode.DENSE].build(kb, ModeOptions(k=3)).invoke("默认端口是多少？")
    print(mode_help())                                      # dense: ...; bm25: ...; hybrid (default): ...
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from ctxrag.enums import SearchMode
from ctxrag.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover - the CLI reads the table for its help: the retrievers load on first build
    from langchain_core.retrievers import BaseRetriever

    from ctxrag.retrievers.base import MetadataFilter
    from ctxrag.retrievers.dense import DenseRetriever
    from ctxrag.retrievers.fusion import FusionRetriever
    from ctxrag.retrievers.kb_bm25 import KBBM25Retriever
    from ctxrag.settings import Settings
    from ctxrag.stores.protocols import KnowledgeSource

log = logging.getLogger(__name__)

IndexKind = Literal["dense", "bm25", "graph"]
"""An index a knowledge base keeps (`ctxrag.stores.registry`) and the evaluation builds and times per kind."""

DOCUMENT_WEIGHT = 4.0
"""Mode ``document``: weight of a chunk's document rank against its own rank, chosen on half of the queries of
docs/benchmarks/document_ranking.md."""
DOCUMENT_DEPTH = 50
"""Mode ``document``: how many hybrid chunks are re-ranked by their document."""

DEFAULT_MODE = SearchMode.HYBRID
"""The mode every face searches with when none is given: `KnowledgeBase.search`, `as_retriever`, the CLI, the
server (tests/kb/test_kb_faces.py checks them all)."""


@dataclass(frozen=True)
class ModeOptions:
    """What a mode's builder gets: `make_retriever`'s options, parsed and checked. ``k`` is the depth the base
    retriever returns (the rerank pool when a reranker follows)."""

    k: int
    filter: MetadataFilter | None = None
    search_type: str = "similarity"
    fetch_k: int | None = None
    lambda_mult: float = 0.5
    score_threshold: float | None = None
    weights: Sequence[float] | None = None
    fusion: str = "auto"
    c: float = 60
    document_weight: float | None = None
    """Mode ``document``: weight of the document's rank (None: `DOCUMENT_WEIGHT`)."""


Builder = Callable[["KnowledgeSource", ModeOptions], "BaseRetriever"]


@dataclass(frozen=True)
class ModeRow:
    """One search mode: its name, a one-line help, the index kinds it reads and its builder."""

    mode: SearchMode
    help: str
    indexes: tuple[IndexKind, ...]
    build: Builder


# ------------------------------------------------------------------------------------------------ the pieces


def dense_retriever(kb: KnowledgeSource, **kwargs: Any) -> DenseRetriever:
    """A `DenseRetriever` over `kb`'s dense index (following its new generations), chunk lookup and embedding model;
    `kwargs` are the retriever's own fields (``k``, ``filter``, ``search_type``, ``search_kwargs``, ...)."""
    from ctxrag.retrievers.dense import DenseRetriever

    return DenseRetriever(index=kb.dense_index(), chunks=kb.chunks, embeddings=kb.embeddings, **kwargs)


def bm25_retriever(kb: KnowledgeSource, **kwargs: Any) -> KBBM25Retriever:
    """A `KBBM25Retriever` over `kb`'s BM25 index (following its new generations) and chunk lookup; `kwargs` are the
    retriever's own fields (``k``, ``filter``, ``fill``, ...)."""
    from ctxrag.retrievers.kb_bm25 import KBBM25Retriever

    return KBBM25Retriever(index=kb.keyword_index(), chunks=kb.chunks, **kwargs)


def fusion_retriever(retrievers: Sequence[BaseRetriever], *, k: int, fusion: str = "auto",
                     weights: Sequence[float] | None = None, c: float = 60, filter: Any = None,
                     name: str = "hybrid", settings: Settings | None = None) -> FusionRetriever:
    """The hybrid stage over ranked `retrievers` ([dense, bm25]), as the ``hybrid`` mode and the evaluation build it.

    ``fusion="auto"`` without `weights` takes mode, weights and c per query kind from `fusion_presets(settings)`
    (`LANGUAGE_DEFAULTS`, and the code preset when ``settings.bm25_stem``); otherwise `fusion` names the mode
    (``"rrf"``, ``"relative_score"``, ``"dbsf"``) and `weights` default to equal.

    Example: ``fusion_retriever([dense, bm25], k=10)`` fuses by the query's language defaults.
    """
    from ctxrag.retrievers.fusion import FusionRetriever, fusion_presets

    parts = list(retrievers)
    auto = fusion == "auto"
    return FusionRetriever(
        retrievers=parts, weights=list(weights) if weights is not None else [1.0 / len(parts)] * len(parts),
        mode="rrf" if auto else fusion, c=c, k=k, filter=filter, name=name,
        by_language=fusion_presets(settings) if auto and weights is None else None,
    )


# ------------------------------------------------------------------------------------------------ the builders


def build_dense(kb: KnowledgeSource, o: ModeOptions) -> DenseRetriever:
    """`dense`: the query's vector against the dense index (similarity, mmr or score threshold)."""
    kwargs: dict[str, Any] = {"lambda_mult": o.lambda_mult}
    if o.fetch_k:
        kwargs["fetch_k"] = o.fetch_k
    if o.score_threshold is not None:
        kwargs["score_threshold"] = o.score_threshold
    return dense_retriever(kb, k=o.k, filter=o.filter, search_type=o.search_type, search_kwargs=kwargs, name="dense")


def build_bm25(kb: KnowledgeSource, o: ModeOptions) -> KBBM25Retriever:
    """`bm25`: the BM25 index; fills up to k with zero-score chunks, as LangChain's `BM25Retriever` does."""
    return bm25_retriever(kb, k=o.k, filter=o.filter, name="bm25")


def build_hybrid(kb: KnowledgeSource, o: ModeOptions) -> FusionRetriever:
    """`hybrid`: dense and BM25 fused by the query language's preset (or the fusion, weights and c given)."""
    bm25 = bm25_retriever(kb, k=o.k, filter=o.filter, fill=False, name="bm25")  # zero-score filler would add noise
    # each side contributes a deeper list than k so fusion has overlap to work with
    depth = max(o.k, 2 * o.k if o.k < 50 else o.k)
    return fusion_retriever([build_dense(kb, replace(o, k=depth)), bm25.model_copy(update={"k": depth})], k=o.k,
                            fusion=o.fusion, weights=o.weights, c=o.c, filter=o.filter, settings=kb.settings)


def build_graph(kb: KnowledgeSource, o: ModeOptions) -> BaseRetriever:
    """`graph`: Graph RAG over the ``graph`` index (entity/relation graph built at ingest), ranked as
    ``settings.graph_rerank`` says (default Personalized PageRank, the best measured: docs/benchmarks/graph_rag.md);
    dense retrieval gives the PageRank passage seeds and fills up."""
    from ctxrag.retrievers.graph import PPR_PASSAGE_SEEDS, GraphRetriever

    graph = kb.graph_index()
    if graph is None:
        raise ConfigError(
            f"knowledge base {kb.name!r} has no graph index; set CTXRAG_GRAPH=true before ingesting "
            "(triplets are extracted by the chat model) or use --mode dense/bm25/hybrid"
        )
    fallback = build_dense(kb, replace(o, k=max(o.k, PPR_PASSAGE_SEEDS)))  # its top passages also seed the walk
    how = kb.settings.graph_rerank
    llm = None
    if how == "llm":
        from ctxrag.models import chat

        try:
            llm = chat.make_chat_model(kb.settings, max_tokens=300, temperature=0.0)
        except Exception as exc:  # noqa: BLE001 - no usable model: rank without one rather than fail the search
            log.warning("graph_rerank='llm' but no chat model (%s); ranking with 'ppr'", exc)
            how = "ppr"
    return GraphRetriever(graph_index=graph, embeddings=kb.embeddings, k=o.k, filter=o.filter, rerank=how, llm=llm,
                          fallback_retriever=fallback, chunks=kb.chunks, name="graph")


def build_headings(kb: KnowledgeSource, o: ModeOptions) -> BaseRetriever:
    """`headings`: BM25 over each chunk's document title and heading path (`HeadingRetriever`)."""
    from ctxrag.retrievers.headings import HeadingRetriever

    return HeadingRetriever(documents=kb.documents, chunks=kb.chunks, k=o.k, filter=o.filter, name="headings")


def build_document(kb: KnowledgeSource, o: ModeOptions) -> BaseRetriever:
    """`document`: the hybrid list re-ranked with each chunk's document rank (BM25 over whole documents:
    `DocumentRankRetriever`)."""
    from ctxrag.retrievers.document_rank import DocumentRankRetriever, DocumentRanks

    depth = max(o.k, DOCUMENT_DEPTH)
    weight = DOCUMENT_WEIGHT if o.document_weight is None else o.document_weight
    return DocumentRankRetriever(base=build_hybrid(kb, replace(o, k=depth)), documents=DocumentRanks(kb.documents),
                                 weight=weight, depth=depth, k=o.k, filter=o.filter, name="document")


def build_milvus_hybrid(kb: KnowledgeSource, o: ModeOptions) -> BaseRetriever:
    """`milvus_hybrid`: fusion inside Milvus (`MilvusHybridRetriever`), dense + sparse with
    ``CTXRAG_DENSE_BACKEND=milvus``, dense + Milvus's full-text BM25 with ``CTXRAG_STORE=milvus``."""
    from ctxrag.retrievers.milvus_hybrid import MilvusHybridRetriever

    return MilvusHybridRetriever(kb=kb, k=o.k, filter=o.filter, name="milvus_hybrid")


# ------------------------------------------------------------------------------------------------ the table

MODES: Mapping[SearchMode, ModeRow] = MappingProxyType({row.mode: row for row in (
    ModeRow(SearchMode.DENSE, "nearest chunks by embedding (similarity, mmr or score threshold)", ("dense",),
            build_dense),
    ModeRow(SearchMode.BM25, "keyword ranking (jieba for Chinese)", ("bm25",), build_bm25),
    ModeRow(SearchMode.HYBRID, "dense and BM25 fused by the query language's preset", ("dense", "bm25"),
            build_hybrid),
    ModeRow(SearchMode.GRAPH, "Graph RAG over the entity graph (CTXRAG_GRAPH=true at ingest)", ("dense", "graph"),
            build_graph),
    ModeRow(SearchMode.MILVUS_HYBRID, "hybrid fused inside Milvus (a Milvus store)", ("dense",),
            build_milvus_hybrid),
    ModeRow(SearchMode.HEADINGS, "BM25 over document titles and section headings", (), build_headings),
    ModeRow(SearchMode.DOCUMENT, "hybrid, each chunk lifted by its whole document's BM25 rank", ("dense", "bm25"),
            build_document),
)})

_missing = [m.value for m in SearchMode if m not in MODES]
if _missing:  # a SearchMode member without a row fails at import, not at the first search in that mode
    raise ConfigError(f"search modes without a row in ctxrag.retrievers.modes.MODES: {_missing}")


def mode_row(mode: SearchMode | str) -> ModeRow:
    """The row of `mode` (a `SearchMode` or any spelling `SearchMode.from_str` reads); `ConfigError` naming an
    unknown one and the choices."""
    return MODES[SearchMode.from_str(mode)]


def mode_help() -> str:
    """The ``--mode`` help text: every mode with its help, the default marked."""
    return "; ".join(f"{row.mode.value}{' (default)' if row.mode is DEFAULT_MODE else ''}: {row.help}"
                     for row in MODES.values())
