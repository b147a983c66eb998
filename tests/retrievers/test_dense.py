"""DenseRetriever: similarity, MMR and score thresholds against hand-checked vectors; filters in every mode;
per-call overrides. Real FAISS and SQLite; the embedding is a hand-made lookup so the expected order is known."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from ctxrag.kb.local import KnowledgeBase
from ctxrag.retrievers.dense import cosine_to_distance, cosine_to_relevance, mmr_select, relevance_score
from ctxrag.retrievers.factory import dense_retriever
from ctxrag.settings import Settings

# 2-d unit vectors by angle: the query is at 0 degrees
ANGLES = {"q": 0, "a": 10, "a2": 12, "b": 40, "c": 80, "d": 180}


def _vec(deg: float) -> list[float]:
    r = np.deg2rad(deg)
    return [float(np.cos(r)), float(np.sin(r))]


class LookupEmbeddings(Embeddings):
    """The first word of the text names its angle."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [_vec(ANGLES[t.split()[0]]) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return _vec(ANGLES[text.split()[0]])


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    kb = KnowledgeBase.open("vec", Settings(home=tmp_path / "h"), embeddings=LookupEmbeddings())
    kb.add_texts([{"text": f"{name} doc", "source": f"mem://{name}", "title": name.upper()} for name in ANGLES if name != "q"])
    return kb


def _titles(docs):
    return [d.metadata["title"] for d in docs]


def test_similarity_order_and_relevance(kb: KnowledgeBase) -> None:
    docs = dense_retriever(kb, search_kwargs={"k": 5}).invoke("q")
    assert _titles(docs) == ["A", "A2", "B", "C", "D"]
    for d in docs:
        cos = np.cos(np.deg2rad(ANGLES[d.metadata["title"].lower()]))
        assert d.metadata["score"] == pytest.approx((1 + cos) / 2, abs=1e-5)
        assert 0.0 <= d.metadata["score"] <= 1.0
    assert docs[-1].metadata["score"] == pytest.approx(0.0, abs=1e-5)  # opposite vector -> 0, not negative


def test_score_threshold(kb: KnowledgeBase) -> None:
    # LangChain's relevance (the FAISS store's, 1 - (2 - 2 cos) / sqrt 2): B (40 deg) = 0.669; C (80 deg) = 0
    r = dense_retriever(kb, search_type="similarity_score_threshold", search_kwargs={"k": 5, "score_threshold": 0.6})
    docs = r.invoke("q")
    assert _titles(docs) == ["A", "A2", "B"]
    assert docs[2].metadata["relevance"] == pytest.approx(1 - (2 - 2 * np.cos(np.deg2rad(40))) / np.sqrt(2), abs=1e-5)
    assert _titles(r.invoke("q", search_kwargs={"score_threshold": 0.7})) == ["A", "A2"]
    assert _titles(r.invoke("q", search_kwargs={"score_threshold": 0.0})) == ["A", "A2", "B", "C", "D"]
    with pytest.raises(ValueError, match="score_threshold"):
        dense_retriever(kb, search_type="similarity_score_threshold", search_kwargs={"k": 3}).invoke("q")
    with pytest.raises(ValueError, match="1.5"):
        dense_retriever(kb, search_kwargs={"score_threshold": 1.5})


def test_mmr_hand_checked(kb: KnowledgeBase) -> None:
    # lambda 0.5, by hand: A first (closest). Then score = 0.5*rel - 0.5*max_sim_to_chosen:
    #   A2: 0.5*cos12 - 0.5*cos2 = -0.0105; B: 0.5*cos40 - 0.5*cos30 = -0.050; C: 0.5*cos80 - 0.5*cos70 = -0.084;
    #   D: 0.5*cos180 - 0.5*cos170 = -0.0076  -> D (diverse, though irrelevant).
    # Then A2 (-0.0105) beats B (-0.050) and C (-0.084) since D is far from all of them.
    r = dense_retriever(kb, search_type="mmr", search_kwargs={"k": 3, "fetch_k": 5, "lambda_mult": 0.5})
    got = _titles(r.invoke("q"))
    q = np.array(_vec(0))
    vecs = np.array([_vec(ANGLES[n]) for n in ["a", "a2", "b", "c", "d"]])
    expect = [["A", "A2", "B", "C", "D"][i] for i in mmr_select(q, vecs, 3, 0.5)]
    assert got == expect == ["A", "D", "A2"]
    # lambda 1 is plain similarity
    assert _titles(r.invoke("q", search_kwargs={"lambda_mult": 1.0})) == ["A", "A2", "B"]


def test_filters_in_every_mode(kb: KnowledgeBase) -> None:
    flt = {"title": ["B", "D"]}
    for search_type, extra in [("similarity", {}), ("mmr", {"fetch_k": 5}), ("similarity_score_threshold", {"score_threshold": 0.0})]:
        r = dense_retriever(kb, search_type=search_type, search_kwargs={"k": 3, "filter": flt, **extra})
        assert _titles(r.invoke("q")) == ["B", "D"], search_type
    pred = dense_retriever(kb, search_kwargs={"k": 2, "filter": lambda md: md["title"].startswith("A")})
    assert _titles(pred.invoke("q")) == ["A", "A2"]
    assert dense_retriever(kb, search_kwargs={"k": 2, "filter": {"title": "Z"}}).invoke("q") == []


def test_per_call_override_and_validation(kb: KnowledgeBase) -> None:
    r = dense_retriever(kb, search_kwargs={"k": 4})
    assert len(r.invoke("q", search_kwargs={"k": 1})) == 1
    with pytest.raises(ValueError, match="unknown argument 'top'"):
        r.invoke("q", search_kwargs={"top": 1})
    with pytest.raises(TypeError, match="unknown argument 'top'"):
        r.invoke("q", top=1)
    assert len(r.invoke("q", k=2)) == 2 and len(dense_retriever(kb, k=3).invoke("q")) == 3
    with pytest.raises(ValueError, match="positive"):
        r.invoke("q", search_kwargs={"k": 0})


async def test_async_matches_sync(kb: KnowledgeBase) -> None:
    r = dense_retriever(kb, search_kwargs={"k": 3})
    assert _titles(await r.ainvoke("q")) == _titles(r.invoke("q"))


def test_cosine_to_relevance_bounds() -> None:
    assert cosine_to_relevance(1.0) == 1.0 and cosine_to_relevance(-1.0) == 0.0 and cosine_to_relevance(0.0) == 0.5


def test_relevance_score_is_langchains_euclidean_relevance_clipped() -> None:
    from langchain_core.vectorstores import VectorStore

    for cos in (1.0, 0.9, 0.5, 0.3):
        distance = cosine_to_distance(cos)
        assert distance == pytest.approx(2 - 2 * cos)
        assert relevance_score(cos) == pytest.approx(max(0.0, VectorStore._euclidean_relevance_score_fn(distance)))
    assert relevance_score(1.0) == 1.0 and relevance_score(0.0) == 0.0 and relevance_score(-1.0) == 0.0
