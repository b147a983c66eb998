"""BM25 retrieval over a knowledge base's BM25 index (kept in step with the dense index at every ingest/delete).

Like LangChain's `BM25Retriever`, it returns ``k`` documents even when fewer contain a query word: the rest are
filled with zero-score chunks in index order (``fill=False`` returns only the matching ones, as fusion wants).

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.retrievers.kb_bm25 import KBBM25Retriever
    KBBM25Retriever(kb=KnowledgeBase.open("demo"), k=5).invoke("FaissIndex.search", k=2, filter={"file_type": "code"})
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document

from ctxrag.retrievers.base import CtxragRetriever, MetadataFilter


class KBBM25Retriever(CtxragRetriever):
    """Lexical retriever over `kb.indexes["bm25"]`; ``bm25_score`` and ``score`` in metadata."""

    kb: Any
    fill: bool = True
    """Return ``k`` documents when fewer contain a query word (zero-score fill, index order), as LangChain's
    `BM25Retriever` does; False: only documents with a query word."""

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        index = self.kb.indexes.get("bm25")
        if index is None:
            raise RuntimeError(f"knowledge base {self.kb.name!r} has no BM25 index")
        allowed = self.kb.allowed_chunk_ids(filter)
        hits = index.search(query, k, allowed_chunk_ids=allowed, fill=self.fill)
        scores = {cid: {"score": float(s), "bm25_score": float(s)} for cid, s in hits}
        return self.kb.get_chunks([cid for cid, _ in hits], scores)
