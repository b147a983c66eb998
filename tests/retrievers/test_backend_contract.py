"""The retriever contract on the self-persisting vector stores: with ``dense_backend="chroma"`` and ``"milvus"`` the
dense, hybrid and (Milvus) in-database hybrid retrievers honour per-call ``k`` and ``filter`` (applied inside Chroma's
``where`` / Milvus's filter expression, before the cut), and pass LangChain's standard retriever suite."""
from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from ctxrag.kb.local import KnowledgeBase
from ctxrag.retrievers.dense import DenseRetriever
from ctxrag.retrievers.factory import make_retriever
from ctxrag.retrievers.milvus_hybrid import MilvusHybridRetriever

from contract_fixtures import QUERY, build_kb, doc_ids

NEEDS = {"chroma": ("chromadb",), "milvus": ("pymilvus", "milvus_lite")}
# one xdist worker runs the module, so each module-scoped store (a Chroma, a Milvus Lite) is built once, not once
# per worker
pytestmark = pytest.mark.xdist_group("retriever-backends")


def _need(backend: str) -> None:
    missing = [m for m in NEEDS[backend] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{backend} backend needs {missing} (pip install 'ctxrag[{backend}]')")


@pytest.fixture(scope="module", params=["chroma", "milvus"])
def backend_kb(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    _need(request.param)
    kb = build_kb(tmp_path_factory.mktemp(request.param), name=f"c-{request.param}", dense_backend=request.param)
    yield kb
    kb.close()


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_per_call_k_and_filter(backend_kb: KnowledgeBase, mode: str) -> None:
    r = make_retriever(backend_kb, mode, k=5)
    assert len(r.invoke(QUERY, k=2)) == 2 and len(r.invoke(QUERY, search_kwargs={"k": 6})) == 6
    few = r.invoke(QUERY, k=5, filter={"doc_id": doc_ids(backend_kb, "gamma", "zeta")})
    assert sorted(d.metadata["title"] for d in few) == ["gamma", "zeta"]
    allowed = {"gamma", "zeta", "eta", "theta"}
    cut = r.invoke(QUERY, k=3, filter={"doc_id": doc_ids(backend_kb, *allowed)})
    assert len(cut) == 3 and {d.metadata["title"] for d in cut} <= allowed


def test_milvus_hybrid_per_call_k_and_filter(milvus_kb: KnowledgeBase) -> None:
    r = MilvusHybridRetriever(kb=milvus_kb, k=5)
    assert len(r.invoke(QUERY, k=2)) == 2
    few = r.invoke(QUERY, k=5, filter={"doc_id": doc_ids(milvus_kb, "gamma", "zeta")})
    assert sorted(d.metadata["title"] for d in few) == ["gamma", "zeta"]
    with pytest.raises(TypeError, match="top"):
        r.invoke(QUERY, top=2)


@pytest.fixture(scope="module")
def chroma_kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    _need("chroma")
    kb = build_kb(tmp_path_factory.mktemp("suite-chroma"), name="sc", dense_backend="chroma")
    yield kb
    kb.close()


@pytest.fixture(scope="module")
def milvus_kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    _need("milvus")
    kb = build_kb(tmp_path_factory.mktemp("suite-milvus"), name="sm", dense_backend="milvus")
    yield kb
    kb.close()


class TestDenseOnChroma(RetrieversIntegrationTests):
    kb: KnowledgeBase

    @pytest.fixture(autouse=True)
    def _kb(self, chroma_kb: KnowledgeBase) -> None:
        self.kb = chroma_kb

    @property
    def retriever_constructor(self) -> type[DenseRetriever]:
        return DenseRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": self.kb.dense_index(), "chunks": self.kb.chunks, "embeddings": self.kb.embeddings}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


class TestMilvusHybridRetriever(TestDenseOnChroma):
    @pytest.fixture(autouse=True)
    def _kb(self, milvus_kb: KnowledgeBase) -> None:  # type: ignore[override]
        self.kb = milvus_kb

    @property
    def retriever_constructor(self) -> type[MilvusHybridRetriever]:  # type: ignore[override]
        return MilvusHybridRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"kb": self.kb}
