"""BM25 retrieval over a knowledge base's BM25 index (kept in step with the dense index at every ingest/delete).

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.retrievers.kb_bm25 import KBBM25Retriever
    KBBM25Retriever(kb=KnowledgeBase.open("demo"), k=5).invoke("FaissIndex.search")
"""
from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field


class KBBM25Retriever(BaseRetriever):
    """Lexical retriever over `kb.indexes["bm25"]`; ``bm25_score`` and ``score`` in metadata."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kb: Any
    k: int = Field(default=10, gt=0)
    filter: Any = None
    """Metadata filter (dict of values or a predicate), as for `DenseRetriever`."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None, filter: Any = None
    ) -> list[Document]:
        index = self.kb.indexes.get("bm25")
        if index is None:
            raise RuntimeError(f"knowledge base {self.kb.name!r} has no BM25 index")
        allowed = self.kb.allowed_chunk_ids(filter if filter is not None else self.filter)
        hits = index.search(query, k or self.k, allowed_chunk_ids=allowed)
        scores = {cid: {"score": float(s), "bm25_score": float(s)} for cid, s in hits}
        return self.kb.get_chunks([cid for cid, _ in hits], scores)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None, filter: Any = None
    ) -> list[Document]:
        return await asyncio.to_thread(
            self._get_relevant_documents, query, run_manager=run_manager.get_sync(), k=k, filter=filter
        )
