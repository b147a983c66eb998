"""A document prepared for indexing (split, contextualized, embedded) outside the write lock, and applying it under
the lock on top of the current generation.

The slow work (contextualizing, embedding) runs while other writers commit; `apply_prepared` then re-checks the
document against the store as it is *now* (another writer may have stored the same content meanwhile: skipped) and
replaces its chunks in every index and the store of the write session.

Example::

    with kb.snapshots.session() as session:
        outcome = apply_prepared(session, prepared)   # FileOutcome: added / updated / skipped
        kb.snapshots.commit(session)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxrag.ingest_report import FileOutcome
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.engine.snapshots import WriteSession, missing_from


@dataclass
class PreparedDocument:
    """Chunk records and their embedded `IndexedChunk`s for one document, ready to apply."""

    doc_id: str
    source: str
    title: str
    content_hash: str
    text: str
    metadata: dict[str, Any]
    records: list[ChunkRecord]
    indexed: list[IndexedChunk]
    reason: str = ""
    """Why it is (re-)indexed when its content did not change (e.g. an index lacked it)."""
    warnings: list[str] = field(default_factory=list)
    """What loading skipped (e.g. malformed JSONL lines), reported with the outcome."""

    def document(self) -> DocumentRecord:
        """The document row to store."""
        return DocumentRecord(self.doc_id, self.source, self.title, self.content_hash, self.text, len(self.records),
                              self.metadata)

    def written(self, replaced: bool) -> FileOutcome:
        """The outcome once stored: ``updated`` when it `replaced` a stored version, else ``added``, with why it was
        (re-)indexed and what loading skipped."""
        notes = [self.reason or ("content changed" if replaced else "")] + self.warnings
        return FileOutcome(self.source, "updated" if replaced else "added", "; ".join(n for n in notes if n),
                           self.doc_id, len(self.records))


UNCHANGED = "unchanged (same content hash)"
"""The detail of a ``skipped`` outcome, on every backend."""


def reindex_reason(missing: list[str]) -> str:
    return f"re-indexed: was missing from index {', '.join(missing)}"


def apply_prepared(session: WriteSession, p: PreparedDocument) -> FileOutcome:
    """Replace the document's chunks in every index and the store of `session` (caller commits)."""
    old = session.store.get_document(p.doc_id)
    old_ids = [c.chunk_id for c in session.store.chunks_of(p.doc_id)] if old is not None else []
    if old is not None and old.content_hash == p.content_hash:
        missing = missing_from(session.indexes, old_ids)
        if not missing:
            return FileOutcome(p.source, "skipped", UNCHANGED, p.doc_id, old.n_chunks)
        p.reason = reindex_reason(missing)
    session.replace([(p.document(), p.records)], p.indexed)
    return p.written(replaced=old is not None)
