"""Dense retrieval over a `DenseIndex` (FAISS, Chroma or Milvus): similarity, MMR and score threshold, with metadata
filters resolved by a `ChunkLookup`.

Scores: ``metadata["score"]`` is ``(1 + cos) / 2`` in [0, 1] (the ranking score fusion reads); ``score_threshold``
compares LangChain's relevance score (`relevance_score`: 0 worst, 1 best), the value LangChain's FAISS store gives the
same embeddings, so a threshold carries over from FAISS code unchanged.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.retrievers.dense import DenseRetriever
    kb = KnowledgeBase.open("demo")
    r = DenseRetriever(index=kb.dense_index(), chunks=kb.chunks, embeddings=kb.embeddings, search_type="mmr", k=4,
                       search_kwargs={"fetch_k": 20})
    r.invoke("what is contextual retrieval?", k=2, filter={"doc_id": ["3f2a..."]})   # per-call overrides
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from pydantic import Field, field_validator, model_validator

from ctxrag.models.embeddings import embed_array
from ctxrag.retrievers.base import CtxragRetriever, UnknownArgumentError
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.protocols import ChunkLookup, DenseIndex

SearchType = Literal["similarity", "mmr", "similarity_score_threshold"]
_ALLOWED_KWARGS = {"k", "fetch_k", "lambda_mult", "score_threshold", "filter"}


def cosine_to_relevance(cos: float) -> float:
    """Map cosine similarity in [-1, 1] to the dense ranking score in [0, 1] (``metadata["score"]``)."""
    return float(min(1.0, max(0.0, (1.0 + cos) / 2.0)))


def cosine_to_distance(cos: float) -> float:
    """Squared euclidean distance between unit vectors, ``2 - 2 cos``: what LangChain's FAISS store (an L2 index) and
    Chroma (``l2``) return as the score of ``similarity_search_with_score`` for normalised embeddings; lower is
    closer."""
    return float(max(0.0, 2.0 - 2.0 * cos))


def distance_to_relevance(distance: float) -> float:
    """LangChain's relevance score for a euclidean distance, ``1 - distance / sqrt(2)`` (as the FAISS store computes
    it), clipped to [0, 1] so 0 is worst and 1 best."""
    return float(min(1.0, max(0.0, 1.0 - distance / math.sqrt(2.0))))


def relevance_score(cos: float) -> float:
    """The relevance score ``score_threshold`` compares (the VectorStore face and `DenseRetriever` alike): the FAISS
    store's value for the same embeddings, so a threshold tuned on a FAISS store keeps the same documents here."""
    return distance_to_relevance(cosine_to_distance(cos))


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


class DenseRetriever(CtxragRetriever):
    """Dense retriever over a `DenseIndex` (inner product on unit vectors), documents from a `ChunkLookup`.

    ``k`` and ``filter`` are fields (``search_kwargs={"k": ..., "filter": ...}`` is accepted too, as for LangChain's
    `VectorStoreRetriever`); per call: ``k``, ``filter``, ``fetch_k``, ``lambda_mult``, ``score_threshold`` or
    ``search_kwargs``.
    """

    index: DenseIndex
    """The index to search (a knowledge base's ``dense_index()`` follows its new generations)."""
    chunks: ChunkLookup
    """Resolves filters to chunk ids and hits to documents (a knowledge base's ``chunks``)."""
    embeddings: Embeddings
    """Embeds the query; the model the index was built with."""
    search_type: SearchType = "similarity"
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``fetch_k`` (mmr pool, default 20), ``lambda_mult`` (mmr, default 0.5), ``score_threshold`` (LangChain's
    relevance in [0, 1], 1 best: `relevance_score`, the FAISS store's value, kept in ``metadata["relevance"]``);
    ``k`` and ``filter`` given here move to the fields of the same name."""

    call_options: ClassVar[frozenset[str]] = frozenset({"fetch_k", "lambda_mult", "score_threshold"})

    @model_validator(mode="before")
    @classmethod
    def _lift_k_and_filter(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("search_kwargs"), dict):
            return data
        data = dict(data)
        sk = _validate_kwargs(dict(data["search_kwargs"]))
        for name in ("k", "filter"):
            if name in sk:
                value = sk.pop(name)
                if name in data and data[name] != value:
                    raise ValueError(f"DenseRetriever: {name} given twice ({data[name]!r} and search_kwargs[{name!r}]={value!r})")
                data[name] = value
        data["search_kwargs"] = sk
        return data

    @field_validator("search_kwargs")
    @classmethod
    def _check_kwargs(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _validate_kwargs(v)

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        p = {"fetch_k": 20, "lambda_mult": 0.5, "score_threshold": None, **self.search_kwargs, **_validate_kwargs(options)}
        if self.search_type == "similarity_score_threshold" and p["score_threshold"] is None:
            raise ValueError("search_type='similarity_score_threshold' needs search_kwargs['score_threshold'] in [0, 1]")
        qvec = embed_array(self.embeddings, [query], is_query=True)[0]
        allowed = self.chunks.allowed_chunk_ids(filter)
        pool_k = max(k, p["fetch_k"]) if self.search_type == "mmr" else k
        hits = self.index.search(qvec, pool_k, allowed_chunk_ids=allowed)
        if self.search_type == "mmr" and hits:
            vecs = self.index.vectors([c for c, _ in hits])
            order = mmr_select(qvec, vecs, k, p["lambda_mult"])
            hits = [hits[i] for i in order]
        scores = {}
        keep = []
        for cid, cos in hits:
            relevance = relevance_score(cos)
            if p["score_threshold"] is not None and relevance < p["score_threshold"]:
                continue
            keep.append(cid)
            score = cosine_to_relevance(cos)
            scores[cid] = {"score": score, "dense_score": score, "cosine": cos, "relevance": relevance}
        return self.chunks.get_chunks(keep, scores)


def _validate_kwargs(v: dict[str, Any]) -> dict[str, Any]:
    unknown = set(v) - _ALLOWED_KWARGS
    if unknown:
        raise UnknownArgumentError(f"DenseRetriever: unknown search_kwargs {sorted(unknown)}; allowed: {sorted(_ALLOWED_KWARGS)}")
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
