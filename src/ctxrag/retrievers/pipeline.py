"""The contextual-retrieval pipeline of Anthropic's recipe as one retriever, composed with LCEL:

    base retriever (hybrid dense + BM25 fusion) -> first ``fetch_k`` (150) -> reranker -> first ``k`` (20)
    -> compressors (filters, extractor), in order -> lost-in-the-middle reorder (optional)

Every stage is optional but the base retriever. The base retriever must itself return at least ``fetch_k``
documents (e.g. a `FusionRetriever` whose sub-retrievers fetch 150 each); the pipeline only cuts.
A reranker that fails returns its input (see `JinaReranker`, `LLMReranker`); the ``k`` cut still applies.

Example::

    from ctxrag.retrievers.fusion import FusionRetriever
    from ctxrag.retrievers.pipeline import RetrievalPipeline
    from ctxrag.compressors import build_reranker
    pipeline = RetrievalPipeline(
        base_retriever=FusionRetriever(retrievers=[dense, bm25]),
        reranker=build_reranker("jina"), fetch_k=150, k=20, reorder=True,
    )
    pipeline.invoke("what is contextual retrieval?")
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from pydantic import Field, PrivateAttr

from ctxrag.compressors.reorder import LongContextReorder
from ctxrag.retrievers.base import CtxragRetriever, sub_call_kwargs
from ctxrag.stores.filters import MetadataFilter


def _compress_step(
    compressor: BaseDocumentCompressor, name: str, *, keep_k: bool = False
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """A runnable over ``{"query", "k", "documents"}`` that applies one compressor to the documents; with `keep_k` a
    reranker whose ``top_n`` is below the call's ``k`` is asked for ``k``."""

    def pick(state: dict[str, Any]) -> BaseDocumentCompressor:
        return _with_top_n(compressor, state["k"]) if keep_k else compressor

    def run(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        docs = pick(state).compress_documents(state["documents"], state["query"], callbacks=config.get("callbacks"))
        return {**state, "documents": list(docs)}

    async def arun(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        docs = await pick(state).acompress_documents(
            state["documents"], state["query"], callbacks=config.get("callbacks")
        )
        return {**state, "documents": list(docs)}

    return RunnableLambda(run, afunc=arun, name=name)


def _cut(size: Callable[[dict[str, Any]], int], name: str) -> Runnable[dict[str, Any], dict[str, Any]]:
    return RunnableLambda(lambda state: {**state, "documents": state["documents"][: size(state)]}, name=name)


def _retrieve_step(base: RetrieverLike, fetch_k: int) -> Runnable[dict[str, Any], dict[str, Any]]:
    """Calls the base retriever with the call's filter (and a deeper k when the call asks for more than `fetch_k`)."""

    def kwargs(state: dict[str, Any]) -> dict[str, Any]:
        return sub_call_kwargs(base, max(fetch_k, state["k"]), state["filter"], "RetrievalPipeline")

    def run(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {**state, "documents": list(base.invoke(state["query"], config, **kwargs(state)))}

    async def arun(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {**state, "documents": list(await base.ainvoke(state["query"], config, **kwargs(state)))}

    return RunnableLambda(run, afunc=arun, name="retrieve")


def _with_top_n(compressor: BaseDocumentCompressor, k: int) -> BaseDocumentCompressor:
    """A reranker that keeps at least `k` documents (its own ``top_n`` may be smaller than the call's ``k``)."""
    top_n = getattr(compressor, "top_n", None)
    if isinstance(top_n, int) and top_n < k:
        return compressor.model_copy(update={"top_n": k})
    return compressor


class RetrievalPipeline(CtxragRetriever):
    """Hybrid retrieval -> rerank -> cut -> compress -> reorder, as one LangChain retriever (sync and async).

    ``k`` (per call too) is how many documents come out; ``filter`` goes to the base retriever, which applies it
    inside its index before anything is cut.

    Example::

        from ctxrag.retrievers.bm25 import BM25Retriever
        bm25 = BM25Retriever.from_texts(["alpha", "beta", "alpha beta"], k=150)
        RetrievalPipeline(base_retriever=bm25, k=2).invoke("alpha")
    """

    base_retriever: RetrieverLike
    """First stage, usually a `FusionRetriever` over dense and BM25 retrievers."""
    fetch_k: int = Field(default=150, ge=1)
    """Candidates passed to the reranker."""
    reranker: BaseDocumentCompressor | None = None
    """`JinaReranker`, `LLMReranker` or any compressor that orders documents best first; None: keep fused order."""
    k: int = Field(default=20, gt=0)
    """Documents kept after reranking."""
    compressors: list[BaseDocumentCompressor] = Field(default_factory=list)
    """Applied in order after the cut (filters, extractor)."""
    reorder: bool = False
    """Lost-in-the-middle reorder at the end: for building a prompt, not for ranking metrics."""

    _chain: Runnable[dict[str, Any], list[Document]] | None = PrivateAttr(default=None)

    def _build(self) -> Runnable[dict[str, Any], list[Document]]:
        chain: Runnable[Any, dict[str, Any]] = _retrieve_step(self.base_retriever, self.fetch_k)
        chain = chain | _cut(lambda st: max(self.fetch_k, st["k"]), f"fetch_{self.fetch_k}")
        if self.reranker is not None:
            chain = chain | _compress_step(self.reranker, type(self.reranker).__name__, keep_k=True)
        chain = chain | _cut(lambda st: st["k"], f"top_{self.k}")
        for compressor in self.compressors:
            chain = chain | _compress_step(compressor, type(compressor).__name__)
        if self.reorder:
            chain = chain | _compress_step(LongContextReorder(), "LongContextReorder")
        return (chain | itemgetter("documents")).with_config(run_name="RetrievalPipelineChain")

    @property
    def chain(self) -> Runnable[dict[str, Any], list[Document]]:
        """The LCEL chain behind this retriever: ``{"query", "k", "filter"}`` in, documents out."""
        if self._chain is None:
            self._chain = self._build()
        return self._chain

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if not name.startswith("_"):
            self._chain = None  # rebuild after a configuration change

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        return self.chain.invoke({"query": query, "k": k, "filter": filter}, {"callbacks": run_manager.get_child()})

    async def _aretrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: AsyncCallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        return await self.chain.ainvoke(
            {"query": query, "k": k, "filter": filter}, {"callbacks": run_manager.get_child()}
        )

    def stages(self) -> Sequence[str]:
        """Names of the stages in order, for logs and `ctxrag` diagnostics."""
        names = ["retrieve", f"fetch_{self.fetch_k}"]
        if self.reranker is not None:
            names.append(type(self.reranker).__name__)
        names.append(f"top_{self.k}")
        names.extend(type(c).__name__ for c in self.compressors)
        if self.reorder:
            names.append("LongContextReorder")
        return names
