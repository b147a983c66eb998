"""A BM25 index over texts derived from the stored documents (a whole document's text, each chunk's headings),
rebuilt when the documents' ids or content hashes change: what the ``headings`` and ``document`` modes search.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.retrievers.stored_bm25 import StoredTextsBM25
    kb = KnowledgeBase.open("demo")
    titles = StoredTextsBM25(kb.documents, lambda row: [(row.doc_id, row.title or "")])
    titles.current().search("部署", k=3)
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.protocols import DocumentLookup

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.stores.documents.docstore import DocumentRow


class StoredTextsBM25:
    """BM25 over the ``(id, text)`` pairs ``texts`` gives for each stored document (empty texts left out), in the
    BM25 ``variant``; built on first use and again whenever `DocumentLookup.document_rows` changes."""

    def __init__(self, documents: DocumentLookup, texts: Callable[[DocumentRow], Iterable[tuple[str, str]]],
                 variant: str = "okapi") -> None:
        self.documents = documents
        self.texts = texts
        self.variant = variant
        self._index: BM25Index | None = None
        self._key: tuple[tuple[str, str], ...] | None = None
        self._lock = threading.Lock()

    def current(self) -> BM25Index:
        """The index over the documents stored now."""
        rows = self.documents.document_rows()
        key = tuple((r.doc_id, r.content_hash) for r in rows)
        with self._lock:
            if self._index is None or key != self._key:
                index = BM25Index("mixed", self.variant, show_progress=False)
                pairs = [(i, t) for row in rows for i, t in self.texts(row) if t]
                if pairs:
                    index.add([t for _, t in pairs], ids=[i for i, _ in pairs])
                self._index, self._key = index, key
            return self._index
