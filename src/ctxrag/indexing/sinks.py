"""Where the ingest pipeline writes (`ctxrag.indexing.pipeline`): a sink stores prepared documents (split,
contextualized, embedded) and says which documents need no preparing at all. The pipeline is the same for every
backend; a knowledge base hands it its sink:

- `GenerationSink`: a local knowledge base's SQLite store and index generations. Each batch is applied under the
  inter-process write lock on top of the generation current *now* and committed as the next one.
- ``MilvusSink`` (`ctxrag.kb.milvus`): a knowledge base in Milvus, each document replaced in its two collections.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.indexing.pipeline import IngestPipeline
    from ctxrag.indexing.sinks import GenerationSink
    kb = KnowledgeBase.open("demo")
    pipeline = IngestPipeline(kb.name, kb.settings, GenerationSink(kb.name, kb.store, kb.snapshots), kb._embed)
    pipeline.add_texts([{"text": "默认端口是 9321。", "source": "note://port"}])
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from ctxrag.errors import KnowledgeBaseDeleted
from ctxrag.indexing.prepared import UNCHANGED, PreparedDocument, apply_prepared, reindex_reason
from ctxrag.ingest_report import FileOutcome, IngestReport
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.documents.docstore import ChunkRecord, DocStore, DocumentRecord
from ctxrag.stores.embedding import to_indexed
from ctxrag.stores.engine.snapshots import IndexSnapshots, missing_from

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.indexing.bulk_import import PrecomputedDocument

class IngestSink(Protocol):
    """What the pipeline writes through (see the module docstring)."""

    def start(self) -> None:
        """A run begins: remember what it writes to (a later batch must land in the same store)."""

    def unchanged(self, source: str, doc_id: str, content_hash: str) -> FileOutcome | str:
        """A ``skipped`` outcome when the document is stored whole with this content (nothing to prepare); else why
        it is indexed although unchanged ("" when it is new or changed)."""

    def write(self, docs: list[PreparedDocument], written_before: int) -> list[FileOutcome]:
        """Store `docs`, each re-checked against what is stored now (another writer may have stored it meanwhile),
        one outcome each in order. `written_before`: documents this run stored before (for an error message)."""

    def write_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]],
                      indexed: list[IndexedChunk]) -> None:
        """Store already-chunked documents with their embedded chunks, replacing the same doc ids."""

    def import_precomputed(self, batches: Iterable[list[PrecomputedDocument]]) -> IngestReport:
        """Store documents whose chunks come with their vectors (no embedding model runs)."""


class GenerationSink:
    """A local knowledge base's document store (`store`, its reading connection) and index generations
    (`snapshots`: write sessions and commits), as an `IngestSink`."""

    def __init__(self, kb_name: str, store: DocStore, snapshots: IndexSnapshots) -> None:
        self.kb_name = kb_name
        self.store = store
        self.snapshots = snapshots
        self._identity: tuple[int, int] | None = None

    def start(self) -> None:
        self._identity = self.store.identity

    def unchanged(self, source: str, doc_id: str, content_hash: str) -> FileOutcome | str:
        old = self.store.get_document(doc_id)
        if old is None or old.content_hash != content_hash:
            return ""
        missing = missing_from(self.snapshots.current(), [c.chunk_id for c in self.store.chunks_of(doc_id)])
        if not missing:
            return FileOutcome(source, "skipped", UNCHANGED, doc_id, old.n_chunks)
        return reindex_reason(missing)

    def write(self, docs: list[PreparedDocument], written_before: int) -> list[FileOutcome]:
        """Under the write lock: apply each document (`apply_prepared`) and commit one generation when any changed;
        `KnowledgeBaseDeleted` when the store this run started on is gone."""
        outcomes: list[FileOutcome] = []
        with self.snapshots.session() as session:
            if self._identity is not None and session.store.identity != self._identity:
                raise KnowledgeBaseDeleted(self.kb_name, f"and created again while this run was writing to it; "
                                                         f"{written_before} documents it committed before were "
                                                         "deleted with it, nothing more was written")
            for item in docs:
                outcomes.append(apply_prepared(session, item))
            if any(o.status in ("added", "updated") for o in outcomes):
                self.snapshots.commit(session)
        return outcomes

    def write_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]],
                      indexed: list[IndexedChunk]) -> None:
        """In one write session and one generation."""
        with self.snapshots.session() as session:
            session.replace(documents, indexed)
            self.snapshots.commit(session)

    def import_precomputed(self, batches: Iterable[list[PrecomputedDocument]]) -> IngestReport:
        """All batches in one write session and one generation (all or nothing); an identical source is skipped, a
        changed one replaced."""
        report = IngestReport()
        with self.snapshots.session() as session:
            for batch in batches:
                indexed: list[IndexedChunk] = []
                documents: list[tuple[DocumentRecord, list[ChunkRecord]]] = []
                for item in batch:
                    doc = item.document
                    if any(d.doc_id == doc.doc_id for d, _ in documents):  # a repeat sees the earlier one stored
                        session.replace(documents, indexed)
                        indexed, documents = [], []
                    old = session.store.get_document(doc.doc_id)
                    if old is not None and old.content_hash == doc.content_hash:
                        report.files.append(FileOutcome(doc.source, "skipped", UNCHANGED, doc.doc_id, old.n_chunks))
                        continue
                    for record, vector in zip(item.chunks, item.vectors):
                        chunk = to_indexed(record)
                        chunk.vector = vector
                        indexed.append(chunk)
                    documents.append((doc, item.chunks))
                    report.files.append(FileOutcome(doc.source, "updated" if old else "added", "", doc.doc_id,
                                                    len(item.chunks)))
                session.replace(documents, indexed)
            if report.added or report.updated:
                self.snapshots.commit(session)
        return report
