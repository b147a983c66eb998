"""`HeadingRetriever`: BM25 over each chunk's document title and section heading path, for questions that name a
document or a section ("Falcon-7 noise", "玉山 地理") rather than words of its text. The search mode ``headings``.

The index is built in memory from the document store (`DocumentLookup`: one light query per search, the chunks
read again only when a document was added, changed or removed), so it needs no index kind of its own.

Example::

    from ctxrag import KnowledgeBase
    kb = KnowledgeBase.open("demo")
    kb.as_retriever(mode="headings", k=3).invoke("Falcon-7 pump noise")
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from pydantic import PrivateAttr

from ctxrag import schema
from ctxrag.retrievers.base import CtxragRetriever, MetadataFilter
from ctxrag.retrievers.stored_bm25 import StoredTextsBM25
from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.protocols import ChunkLookup, DocumentLookup


def heading_text(title: str | None, heading_path: str | None) -> str:
    """What the ``headings`` mode indexes for a chunk: its document title and heading path, the title once when the
    path already starts with it (a Markdown file's title is its first heading)."""
    title, path = (title or "").strip(), (heading_path or "").strip()
    return path if title and path.startswith(title) else f"{title}\n{path}".strip()


class HeadingRetriever(CtxragRetriever):
    """BM25 over title + heading path per chunk (see the module docstring); ``heading_score`` and ``score`` in
    metadata. Only chunks with a title or heading word of the query are returned."""

    documents: DocumentLookup
    """The documents and their chunks (a knowledge base's ``documents``): what the index is built from."""
    chunks: ChunkLookup
    """Resolves filters to chunk ids and hits to documents (a knowledge base's ``chunks``)."""

    _stored: StoredTextsBM25 = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        documents = self.documents
        # a heading is shared by its section's chunks, so its words sit in many of them: Okapi's idf drops to its
        # floor there, BM25+'s stays positive and still ranks the rarer heading first
        self._stored = StoredTextsBM25(documents, lambda row: [
            (c.chunk_id, heading_text(c.metadata.get(schema.TITLE) or row.title, c.metadata.get(schema.HEADING_PATH)))
            for c in documents.chunks_of(row.doc_id)], variant="bm25+")

    def _current(self) -> BM25Index:
        """The index over the documents stored now, rebuilt when their ids or content hashes changed."""
        return self._stored.current()

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        index = self._current()
        if not len(index):
            return []
        allowed = self.chunks.allowed_chunk_ids(filter)
        hits = index.search(query, k=k, allowed_ids=allowed)
        scores = {cid: {schema.SCORE: float(s), "heading_score": float(s)} for cid, s in hits}
        return self.chunks.get_chunks([cid for cid, _ in hits], scores)
