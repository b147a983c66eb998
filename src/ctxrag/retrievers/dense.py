"""Dense retrieval over a knowledge base's FAISS index: similarity, MMR and score threshold, with metadata filters.

Relevance scores are correct for cosine indexes: ``(1 + cos) / 2`` in [0, 1] (stock LangChain FAISS maps inner product
with a Euclidean formula and can return negative values).

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.retrievers.dense import DenseRetriever
    r = DenseRetriever(kb=KnowledgeBase.open("demo"), search_type="mmr", search_kwargs={"k": 4, "fetch_k": 20})
    r.invoke("what is contextual retrieval?", search_kwargs={"k": 2})   # per-call override
"""
from __future__ import annotations

import asyncio
from typing import Any, Literal

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, field_validator

from ctxrag.models.embeddings import embed_array

SearchType = Literal["similarity", "mmr", "similarity_score_threshold"]
_ALLOWED_KWARGS = {"k", "fetch_k", "lambda_mult", "score_threshold", "filter"}


def cosine_to_relevance(cos: float) -> float:
    """Map cosine similarity in [-1, 1] to a relevance score in [0, 1]."""
    return float(min(1.0, max(0.0, (1.0 + cos) / 2.0)))


def mmr_select(query_vec: np.ndarray, cand_vecs: np.ndarray, k: int, lambda_mult: float) -> list[int]:
    """Maximal marginal relevance over unit vectors: indices of `k` candidates, best first."""
    if not 0.0 <= lambda_mult <= 1.0:
        raise ValueError(f"lambda_mult must be in [0, 1], got {lambda_mult}")
    n = cand_vecs.shape[0]
    if n == 0 or k <= 0:
        return []
    rel = cand_vecs @ query_vec
    chosen = [int(np.argmax(rel))]
    max_sim = cand_vecs @ cand_vecs[chosen[0]]
    while len(chosen) < min(k, n):
        score = lambda_mult * rel - (1.0 - lambda_mult) * max_sim
        score[chosen] = -np.inf
        nxt = int(np.argmax(score))
        chosen.append(nxt)
        max_sim = np.maximum(max_sim, cand_vecs @ cand_vecs[nxt])
    return chosen


class DenseRetriever(BaseRetriever):
    """Dense retriever over a `KnowledgeBase` (FAISS inner product on unit vectors)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kb: Any
    """The `KnowledgeBase` to search."""
    search_type: SearchType = "similarity"
    search_kwargs: dict[str, Any] = Field(default_factory=lambda: {"k": 10})
    """``k``, ``fetch_k`` (mmr pool, default 20), ``lambda_mult`` (mmr, default 0.5), ``score_threshold``
    (relevance in [0, 1]), ``filter`` (dict of metadata values or a predicate)."""

    @field_validator("search_kwargs")
    @classmethod
    def _check_kwargs(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _validate_kwargs(v)

    def _params(self, overrides: dict[str, Any] | None) -> dict[str, Any]:
        params = {"k": 10, "fetch_k": 20, "lambda_mult": 0.5, "score_threshold": None, "filter": None}
        params.update(self.search_kwargs)
        if overrides:
            params.update(_validate_kwargs(overrides))
        if self.search_type == "similarity_score_threshold" and params["score_threshold"] is None:
            raise ValueError("search_type='similarity_score_threshold' needs search_kwargs['score_threshold'] in [0, 1]")
        return params

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, search_kwargs: dict[str, Any] | None = None
    ) -> list[Document]:
        p = self._params(search_kwargs)
        qvec = embed_array(self.kb.embeddings, [query], is_query=True)[0]
        allowed = self.kb.allowed_chunk_ids(p["filter"])
        pool_k = max(p["k"], p["fetch_k"]) if self.search_type == "mmr" else p["k"]
        hits = self.kb.dense.search(qvec, pool_k, allowed_chunk_ids=allowed)
        if self.search_type == "mmr" and hits:
            vecs = self.kb.dense.vectors([c for c, _ in hits])
            order = mmr_select(qvec, vecs, p["k"], p["lambda_mult"])
            hits = [hits[i] for i in order]
        scores = {}
        keep = []
        for cid, cos in hits:
            rel = cosine_to_relevance(cos)
            if p["score_threshold"] is not None and rel < p["score_threshold"]:
                continue
            keep.append(cid)
            scores[cid] = {"score": rel, "dense_score": rel, "cosine": cos}
        return self.kb.get_chunks(keep, scores)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, search_kwargs: dict[str, Any] | None = None
    ) -> list[Document]:
        return await asyncio.to_thread(
            self._get_relevant_documents, query, run_manager=run_manager.get_sync(), search_kwargs=search_kwargs
        )


def _validate_kwargs(v: dict[str, Any]) -> dict[str, Any]:
    unknown = set(v) - _ALLOWED_KWARGS
    if unknown:
        raise ValueError(f"unknown search_kwargs {sorted(unknown)}; allowed: {sorted(_ALLOWED_KWARGS)}")
    if "k" in v and (not isinstance(v["k"], int) or v["k"] <= 0):
        raise ValueError(f"search_kwargs['k'] must be a positive int, got {v['k']!r}")
    if "fetch_k" in v and (not isinstance(v["fetch_k"], int) or v["fetch_k"] <= 0):
        raise ValueError(f"search_kwargs['fetch_k'] must be a positive int, got {v['fetch_k']!r}")
    t = v.get("score_threshold")
    if t is not None and not (isinstance(t, (int, float)) and 0.0 <= t <= 1.0):
        raise ValueError(f"search_kwargs['score_threshold'] must be in [0, 1], got {t!r}")
    lm = v.get("lambda_mult")
    if lm is not None and not (isinstance(lm, (int, float)) and 0.0 <= lm <= 1.0):
        raise ValueError(f"search_kwargs['lambda_mult'] must be in [0, 1], got {lm!r}")
    return v
