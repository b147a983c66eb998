"""BM25 retrieval over a knowledge base's `KeywordIndex` (kept in step with the dense index at every ingest/delete),
documents and filters from its `ChunkLookup`.

It owns nothing: the index and the chunks belong to the knowledge base (local segments or Milvus's full-text BM25),
so it follows every commit and filters through the chunk lookup. `ctxrag.retrievers.bm25.BM25Retriever` is the other
one: it builds and owns its own index over documents it is given (no knowledge base).

Like LangChain's `BM25Retriever`, it returns ``k`` documents even when fewer contain a query word: the rest are
filled with zero-score chunks in index order (``fill=False`` returns only the matching ones, as fusion wants).

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.retrievers.kb_bm25 import KBBM25Retriever
    kb = KnowledgeBase.open("demo")
    KBBM25Retriever(index=kb.keyword_index(), chunks=kb.chunks, k=5).invoke("FaissIndex.search", k=2,
                                                                            filter={"file_type": "code"})
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document

from ctxrag.retrievers.base import CtxragRetriever
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.protocols import ChunkLookup, KeywordIndex


class KBBM25Retriever(CtxragRetriever):
    """Lexical retriever over a `KeywordIndex`; ``bm25_score`` and ``score`` in metadata."""

    index: KeywordIndex
    """The BM25 index (a knowledge base's ``keyword_index()`` follows its new generations)."""
    chunks: ChunkLookup
    """Resolves filters to chunk ids and hits to documents (a knowledge base's ``chunks``)."""
    fill: bool = True
    """Return ``k`` documents when fewer contain a query word (zero-score fill, index order), as LangChain's
    `BM25Retriever` does; False: only documents with a query word."""

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        allowed = self.chunks.allowed_chunk_ids(filter)
        hits = self.index.search(query, k, allowed_chunk_ids=allowed, fill=self.fill)
        scores = {cid: {"score": float(s), "bm25_score": float(s)} for cid, s in hits}
        return self.chunks.get_chunks([cid for cid, _ in hits], scores)
