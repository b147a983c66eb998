"""The contextual-retrieval pipeline of Anthropic's recipe as one retriever, composed with LCEL:

    base retriever (hybrid dense + BM25 fusion) -> first ``fetch_k`` (150) -> reranker -> first ``top_n`` (20)
    -> compressors (filters, extractor), in order -> lost-in-the-middle reorder (optional)

Every stage is optional but the base retriever. The base retriever must itself return at least ``fetch_k``
documents (e.g. a `FusionRetriever` whose sub-retrievers fetch 150 each); the pipeline only cuts.
A reranker that fails returns its input (see `JinaReranker`, `LLMReranker`); the ``top_n`` cut still applies.

Example::

    from ctxrag.retrievers.fusion import FusionRetriever
    from ctxrag.retrievers.pipeline import RetrievalPipeline
    from ctxrag.compressors import build_reranker
    pipeline = RetrievalPipeline(
        base_retriever=FusionRetriever(retrievers=[dense, bm25]),
        reranker=build_reranker("jina"), fetch_k=150, top_n=20, reorder=True,
    )
    pipeline.invoke("what is contextual retrieval?")
"""
from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever, RetrieverLike
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda, RunnablePassthrough
from pydantic import ConfigDict, Field, PrivateAttr

from ctxrag.compressors.reorder import LongContextReorder


def _compress_step(compressor: BaseDocumentCompressor, name: str) -> Runnable[dict[str, Any], dict[str, Any]]:
    """A runnable over ``{"query", "documents"}`` that applies one compressor to the documents."""

    def run(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        docs = compressor.compress_documents(state["documents"], state["query"], callbacks=config.get("callbacks"))
        return {**state, "documents": list(docs)}

    async def arun(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        docs = await compressor.acompress_documents(
            state["documents"], state["query"], callbacks=config.get("callbacks")
        )
        return {**state, "documents": list(docs)}

    return RunnableLambda(run, afunc=arun, name=name)


def _cut(k: int, name: str) -> Runnable[dict[str, Any], dict[str, Any]]:
    return RunnableLambda(lambda state: {**state, "documents": state["documents"][:k]}, name=name)


class RetrievalPipeline(BaseRetriever):
    """Hybrid retrieval -> rerank -> cut -> compress -> reorder, as one LangChain retriever (sync and async).

    Example::

        from langchain_community.retrievers import BM25Retriever
        bm25 = BM25Retriever.from_texts(["alpha", "beta", "alpha beta"], k=150)
        RetrievalPipeline(base_retriever=bm25, top_n=2).invoke("alpha")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_retriever: RetrieverLike
    """First stage, usually a `FusionRetriever` over dense and BM25 retrievers."""
    fetch_k: int = Field(default=150, ge=1)
    """Candidates passed to the reranker."""
    reranker: BaseDocumentCompressor | None = None
    """`JinaReranker`, `LLMReranker` or any compressor that orders documents best first; None: keep fused order."""
    top_n: int = Field(default=20, ge=1)
    """Documents kept after reranking."""
    compressors: list[BaseDocumentCompressor] = Field(default_factory=list)
    """Applied in order after the cut (filters, extractor)."""
    reorder: bool = False
    """Lost-in-the-middle reorder at the end: for building a prompt, not for ranking metrics."""

    _chain: Runnable[str, list[Document]] | None = PrivateAttr(default=None)

    def _build(self) -> Runnable[str, list[Document]]:
        chain: Runnable[Any, dict[str, Any]] = RunnableLambda(lambda q: {"query": q}, name="query") | (
            RunnablePassthrough.assign(documents=itemgetter("query") | self.base_retriever)
        )
        chain = chain | _cut(self.fetch_k, f"fetch_{self.fetch_k}")
        if self.reranker is not None:
            chain = chain | _compress_step(self.reranker, type(self.reranker).__name__)
        chain = chain | _cut(self.top_n, f"top_{self.top_n}")
        for compressor in self.compressors:
            chain = chain | _compress_step(compressor, type(compressor).__name__)
        if self.reorder:
            chain = chain | _compress_step(LongContextReorder(), "LongContextReorder")
        return (chain | itemgetter("documents")).with_config(run_name="RetrievalPipelineChain")

    @property
    def chain(self) -> Runnable[str, list[Document]]:
        """The LCEL chain behind this retriever (query in, documents out)."""
        if self._chain is None:
            self._chain = self._build()
        return self._chain

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if not name.startswith("_"):
            self._chain = None  # rebuild after a configuration change

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self.chain.invoke(query, {"callbacks": run_manager.get_child()})

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return await self.chain.ainvoke(query, {"callbacks": run_manager.get_child()})

    def stages(self) -> Sequence[str]:
        """Names of the stages in order, for logs and `ctxrag` diagnostics."""
        names = ["retrieve", f"fetch_{self.fetch_k}"]
        if self.reranker is not None:
            names.append(type(self.reranker).__name__)
        names.append(f"top_{self.top_n}")
        names.extend(type(c).__name__ for c in self.compressors)
        if self.reorder:
            names.append("LongContextReorder")
        return names
