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
from ctxrag.stores.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.snapshots import WriteSession, missing_from


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


def reindex_reason(missing: list[str]) -> str:
    return f"re-indexed: was missing from index {', '.join(missing)}"


def apply_prepared(session: WriteSession, p: PreparedDocument) -> FileOutcome:
    """Replace the document's chunks in every index and the store of `session` (caller commits)."""
    old = session.store.get_document(p.doc_id)
    old_ids = [c.chunk_id for c in session.store.chunks_of(p.doc_id)] if old is not None else []
    if old is not None and old.content_hash == p.content_hash:
        missing = missing_from(session.indexes, old_ids)
        if not missing:
            return FileOutcome(p.source, "skipped", "unchanged (same content hash)", p.doc_id, old.n_chunks)
        p.reason = reindex_reason(missing)
    document = DocumentRecord(p.doc_id, p.source, p.title, p.content_hash, p.text, len(p.records), p.metadata)
    session.replace([(document, p.records)], p.indexed)
    status = "updated" if old is not None else "added"
    notes = [p.reason or ("content changed" if old else "")] + p.warnings
    return FileOutcome(p.source, status, "; ".join(n for n in notes if n), p.doc_id, len(p.records))
