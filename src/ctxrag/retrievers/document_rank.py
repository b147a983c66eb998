"""`DocumentRankRetriever`: chunks ranked by their own rank and by their document's, so a question about one file
finds that file's chunks before a sibling file's. The search mode ``document``.

A question usually names a behaviour of one document; the chunk that answers it is one of several of that document,
and a chunk of another document that shares the question's words can outrank it. Scoring the documents too (BM25
over each document's title, summary and chunk texts, contexts included) and fusing each chunk's rank with its
document's rank lifts the chunks of the document the question is about:

    score(chunk) = (1 / (c + chunk rank) + weight / (c + document rank)) / ((1 + weight) / (c + 1))

(weighted reciprocal rank fusion, normalised so that first place in both lists scores 1). A chunk whose document
has no query word gets no document part. The document index is built in memory from the document store
(`DocumentLookup`), rebuilt only when a document was added, changed or removed, like the ``headings`` mode's.

The measured effect and the weight it was chosen with: docs/benchmarks/document_ranking.md.

Example::

    from ctxrag import KnowledgeBase
    kb = KnowledgeBase.open("demo")
    kb.as_retriever(mode="document", k=5).invoke("how does the parser handle escaped quotes?")
"""
from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import patch_config
from pydantic import Field, PrivateAttr, field_validator

from ctxrag import schema
from ctxrag.retrievers.base import CtxragRetriever, MetadataFilter, sub_call_kwargs
from ctxrag.retrievers.stored_bm25 import StoredTextsBM25
from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.protocols import DocumentLookup

DOCUMENT_SCORE = "document_score"
DOCUMENT_RANK = "document_rank"


def document_text(title: str | None, summary: str | None, chunk_texts: Sequence[str]) -> str:
    """What the document index holds for one document: its title, its summary and its chunks' indexed texts
    (each chunk with its context, as the chunk indexes see it)."""
    parts = [p.strip() for p in (title, summary) if p and p.strip()]
    return "\n".join(parts + [t for t in chunk_texts if t])


class DocumentRanks:
    """BM25 over whole documents (`document_text`), rebuilt from `documents` when their ids or content hashes change.

    Example::

        ranks = DocumentRanks(kb.documents)
        ranks.rank("escaped quotes in the parser")   # {doc_id: 1, other_doc_id: 2, ...}
    """

    def __init__(self, documents: DocumentLookup) -> None:
        self.documents = documents
        self._stored = StoredTextsBM25(documents, lambda row: [(row.doc_id, document_text(
            row.title, row.summary, [c.indexed_text or c.content for c in documents.chunks_of(row.doc_id)]))])

    def index(self) -> BM25Index:
        """The index over the documents stored now."""
        return self._stored.current()

    def rank(self, query: str) -> dict[str, tuple[int, float]]:
        """``doc_id -> (rank, BM25 score)`` of every document with a query word, rank 1 best."""
        index = self.index()
        if not len(index):
            return {}
        hits = index.search(query, k=len(index))
        return {doc_id: (rank, float(score)) for rank, (doc_id, score) in enumerate(hits, start=1) if score > 0}


class DocumentRankRetriever(CtxragRetriever):
    """Chunks of `base` re-ranked with their document's rank (see the module docstring); ``document_score``,
    ``document_rank`` and ``score`` (the fused score in [0, 1]) in metadata.

    `base` returns chunks with ``metadata["doc_id"]`` (every ctxrag chunk retriever does); ``depth`` of its best
    chunks are re-ranked and the best ``k`` returned.

    Example::

        from ctxrag.retrievers.document_rank import DocumentRanks, DocumentRankRetriever
        hybrid = kb.as_retriever(mode="hybrid", k=50)
        r = DocumentRankRetriever(base=hybrid, documents=DocumentRanks(kb.documents), weight=1.0, k=5)
        r.invoke("how does the parser handle escaped quotes?")
    """

    base: BaseRetriever
    """The chunk retriever whose list is re-ranked (e.g. the ``hybrid`` mode's)."""
    documents: DocumentRanks
    """Ranks the documents for a query."""
    weight: float = Field(default=1.0, ge=0)
    """Weight of the document's rank against the chunk's own (0: the base ranking unchanged)."""
    c: float = Field(default=60, ge=0)
    """Rank constant of the fusion, as in reciprocal rank fusion."""
    depth: int = Field(default=50, gt=0)
    """How many of the base's chunks are re-ranked (at least ``k``)."""

    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @field_validator("weight", "c")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"must be finite, got {value!r}")
        return value

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        kwargs = sub_call_kwargs(self.base, max(k, self.depth), filter, "DocumentRankRetriever")
        chunks = self.base.invoke(query, patch_config(None, callbacks=run_manager.get_child()), **kwargs)
        return rerank_by_document(chunks, self.documents.rank(query) if self.weight else {}, k=k,
                                  weight=self.weight, c=self.c)


def rerank_by_document(chunks: Sequence[Document], doc_ranks: dict[str, tuple[int, float]], *, k: int,
                       weight: float, c: float) -> list[Document]:
    """`chunks` (best first) re-ranked by the fused score of their rank and their document's rank in `doc_ranks`;
    the best `k`, each a copy with the scores in its metadata. Ties keep the base order."""
    norm = (1.0 + weight) / (c + 1.0)
    scored = []
    for rank, chunk in enumerate(chunks, start=1):
        doc_rank, doc_score = doc_ranks.get(chunk.metadata.get(schema.DOC_ID, ""), (None, 0.0))
        score = 1.0 / (c + rank) + (weight / (c + doc_rank) if doc_rank else 0.0)
        scored.append((score / norm, rank, chunk, doc_rank, doc_score))
    scored.sort(key=lambda row: (-row[0], row[1]))
    out = []
    for score, _, chunk, doc_rank, doc_score in scored[:k]:
        metadata = {**chunk.metadata, schema.SCORE: min(1.0, score), DOCUMENT_SCORE: doc_score,
                    DOCUMENT_RANK: doc_rank}
        out.append(Document(page_content=chunk.page_content, metadata=metadata, id=chunk.id))
    return out
