"""A knowledge base that lives wholly in Milvus (``CTXRAG_STORE=milvus``): chunks, documents, dense vectors and
Milvus's full-text BM25 in two collections (`ctxrag.stores.milvus_resident`), so any number of stateless ctxrag
processes on any machines share it: an ingest through one is found by a search through another at once.

The same product as the local knowledge base: `as_retriever(mode=dense|bm25|hybrid)` goes through
`ctxrag.retrievers.factory` with this knowledge base's `ChunkLookup`, `DenseIndex` and `KeywordIndex`
(`ctxrag.stores.milvus_resident.views`), so filters and per-call ``k`` work as they do locally and hybrid is fused
by ctxrag's fusion with the same per-language presets. Ingest is the local one's pipeline (`ctxrag.indexing.pipeline`:
load, split, contexts, embedding in batches across documents, the same reports); its sink, `MilvusSink`, replaces
each document in Milvus (`MilvusResidentStore.write_document`) every ``commit_every`` prepared documents. Graph RAG
needs the local store.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.kb.base import BaseKnowledgeBase
from ctxrag.settings import Settings
    kb = KnowledgeBase.open("wiki", Settings(store="milvus", milvus_uri="http://milvus.internal:19530"))
    kb.ingest(["docs/"])
    kb.search("存储空间多大", k=3, mode="hybrid")
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from ctxrag.errors import ConfigError, CtxragError, DocumentNotFound, KnowledgeBaseNotFound, warn_deprecated
from ctxrag.indexing.prepared import UNCHANGED, PreparedDocument
from ctxrag.ingest_report import FileOutcome, IngestReport
from ctxrag.kb.base import BaseKnowledgeBase
from ctxrag.settings import Settings
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.consistency import CheckReport, IndexDifference, RepairReport
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.documents.document_keys import require_document
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.vectors.milvus import is_server_uri
from ctxrag.stores.milvus_resident import collections as cols
from ctxrag.stores.milvus_resident.staging import StagedCopy
from ctxrag.stores.milvus_resident.store import MilvusResidentStore
from ctxrag.stores.milvus_resident.writers import describe_writer
from ctxrag.stores.milvus_resident.expressions import FilteredIds
from ctxrag.stores.milvus_resident.views import MilvusChunkLookup, MilvusDenseIndex, MilvusKeywordIndex

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.indexing.bulk_import import PrecomputedDocument

LITE_FILE = "milvus-kb.db"
"""Without ``CTXRAG_MILVUS_URI``: a Milvus Lite file in the knowledge base folder (one process at a time)."""


def _uri(settings: Settings, root: Path) -> str:
    return settings.milvus_uri or str(root / LITE_FILE)


def _token(settings: Settings) -> str | None:
    token = settings.milvus_token
    return token.get_secret_value() if token is not None else None


class MilvusKnowledgeBase(BaseKnowledgeBase):
    """A named knowledge base in Milvus (see the module docstring); open it with ``KnowledgeBase.open`` and
    ``Settings(store="milvus")``."""

    def __init__(self, name: str, settings: Settings, embeddings: Embeddings | None = None, *,
                 create: bool = True) -> None:
        if settings.graph:
            raise ConfigError("CTXRAG_GRAPH=true needs the local store (CTXRAG_STORE=local): the graph index does not "
                              "live in Milvus")
        self.name = name
        self.settings = settings
        self.root = settings.kb_root / name
        self._embeddings = embeddings
        if not create and not settings.milvus_uri and not (self.root / LITE_FILE).exists():
            raise KnowledgeBaseNotFound(name, settings.kb_root)  # before Milvus Lite makes an empty file
        self.store = MilvusResidentStore(_uri(settings, self.root), name, token=_token(settings),
                                         analysis=settings.milvus_analysis,
                                         read_consistency=settings.milvus_read_consistency, create=create,
                                         writer_grace_s=settings.milvus_writer_grace_s)
        if not self.store.exists:
            self.store.close()
            raise KnowledgeBaseNotFound(name, settings.kb_root)
        self.store.reconcile()  # writes another process left half done long ago
        self._chunks = MilvusChunkLookup(self.store)

    @classmethod
    def open(cls, name: str, settings: Settings, *, create: bool = True,
             embeddings: Embeddings | None = None) -> "MilvusKnowledgeBase":
        return cls(name, settings, embeddings, create=create)

    @staticmethod
    def list_names(settings: Settings) -> list[str]:
        """Knowledge bases on the configured Milvus server, or in Milvus Lite files under the knowledge base root."""
        if settings.milvus_uri and is_server_uri(settings.milvus_uri):
            from ctxrag.stores.vectors.milvus import connect

            holder = type("Holder", (), {})()
            client, close = connect(holder, settings.milvus_uri, _token(settings))
            try:
                names = []
                for c in client.list_collections():
                    if c.startswith(cols.PREFIX) and c.endswith("_docs"):
                        name = cols.kb_of(client.describe_collection(c))
                        if name:
                            names.append(name)
                return sorted(names)
            finally:
                close()
        if not settings.kb_root.is_dir():
            return []
        return sorted(p.name for p in settings.kb_root.iterdir() if (p / LITE_FILE).exists())

    @staticmethod
    def delete_kb(name: str, settings: Settings) -> None:
        if not settings.milvus_uri and not (settings.kb_root / name / LITE_FILE).exists():
            raise KnowledgeBaseNotFound(name, settings.kb_root)
        store = MilvusResidentStore(_uri(settings, settings.kb_root / name), name, token=_token(settings),
                                    create=False)
        try:
            if not store.exists:
                raise KnowledgeBaseNotFound(name, settings.kb_root)
            store.drop()
        finally:
            store.close()
        root = settings.kb_root / name
        if root.is_dir():
            shutil.rmtree(root)

    def close(self) -> None:
        self.store.close()

    def __repr__(self) -> str:
        return f"MilvusKnowledgeBase({self.name!r}, {self.store!r})"

    # -- the read side (a `KnowledgeSource`; ``embeddings`` from `LazyEmbeddings`) -------------------------------
    @property
    def chunks(self) -> MilvusChunkLookup:
        return self._chunks

    @property
    def documents(self) -> MilvusResidentStore:
        return self.store

    def dense_index(self) -> MilvusDenseIndex:
        return MilvusDenseIndex(self.store)

    def keyword_index(self) -> MilvusKeywordIndex:
        return MilvusKeywordIndex(self.store)

    def graph_index(self) -> None:
        return None

    @property
    def dense(self) -> MilvusDenseIndex:
        """Deprecated: `dense_index()`."""
        warn_deprecated("kb.dense", "kb.dense_index()")
        return self.dense_index()

    @property
    def indexes(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dense": self.dense_index()}
        if self.store.fulltext:
            out["bm25"] = self.keyword_index()
        return out

    @property
    def generation(self) -> int:
        """Milvus has no index generations: always 0 (every write is visible when it returns)."""
        return 0

    def refresh(self) -> bool:
        return False

    def set_summaries(self, summaries: dict[str, str]) -> None:
        for doc_id, summary in summaries.items():
            self.store.set_summary(doc_id, summary)

    def get_chunks(self, chunk_ids: list[str], scores: dict[str, dict[str, float]] | None = None) -> list[Document]:
        """Deprecated: ``kb.chunks.get_chunks``."""
        warn_deprecated("kb.get_chunks", "kb.chunks.get_chunks")
        return self._chunks.get_chunks(chunk_ids, scores)

    def all_chunks(self) -> list[Document]:
        """Deprecated: ``kb.chunks.all_chunks``."""
        warn_deprecated("kb.all_chunks", "kb.chunks.all_chunks")
        return self._chunks.all_chunks()

    def allowed_chunk_ids(self, filter: MetadataFilter | None) -> FilteredIds | None:
        """Deprecated: ``kb.chunks.allowed_chunk_ids``."""
        warn_deprecated("kb.allowed_chunk_ids", "kb.chunks.allowed_chunk_ids")
        return self._chunks.allowed_chunk_ids(filter)

    # -- documents ----------------------------------------------------------------------------------------------
    def list_documents(self) -> list[DocumentRecord]:
        return self.store.list_documents()

    def get_document(self, key: str) -> DocumentRecord:
        return require_document(self.store, key, self.name)

    def delete_document(self, key: str) -> DocumentRecord:
        doc = self.get_document(key)
        if self.store.document_state(doc.doc_id) is None:
            raise DocumentNotFound(f"no document {key!r} in knowledge base {self.name!r} (deleted meanwhile)")
        self.store.delete_document(doc.doc_id)
        return doc

    def delete_documents(self, doc_ids: list[str]) -> list[str]:
        """Delete documents by id; unknown ids are ignored. Returns the ids that were deleted."""
        deleted = []
        for doc_id in doc_ids:
            if self.store.document_state(doc_id) is not None:
                self.store.delete_document(doc_id)
                deleted.append(doc_id)
        return deleted

    def count(self) -> tuple[int, int]:
        """How many documents and chunks it holds (from the document store: no index is read)."""
        return self.store.count()

    def stats(self) -> dict[str, Any]:
        docs, chunks = self.count()
        return {"name": self.name, "path": self.store.where, "store": "milvus", "documents": docs, "chunks": chunks,
                "generation": 0, "indexes": {k: chunks for k in self.indexes}}

    # -- writes (`BaseKnowledgeBase.ingest`: `ctxrag.indexing.pipeline` writing to `MilvusSink`) ----------------
    def ingest_sink(self) -> MilvusSink:
        """Milvus as the pipeline's sink: each document replaced on its own (not all or nothing as on the local
        store: a failed `import_precomputed` stops there, and re-running it skips what was imported, by content
        hash)."""
        return MilvusSink(self.store)

    # -- maintenance (``ctxrag kb check`` / ``kb repair`` / ``kb optimize``) -----------------------------------------
    def optimize(self) -> dict[str, tuple[int, int]]:
        """Nothing to merge here: Milvus merges its own segments (compaction on the server). `CtxragError` saying
        so, instead of pretending a merge happened."""
        raise CtxragError(f"knowledge base {self.name!r} lives in Milvus at {self.store.where} (CTXRAG_STORE=milvus), "
                          "which merges its own segments (compaction on the Milvus server); `ctxrag kb optimize` "
                          "merges the index segments of a local knowledge base and has nothing to do here")

    def check(self) -> CheckReport:
        """Each document row against its chunks: unfinished writes or deletes, chunk counts that differ, chunks of
        another write, chunks without a document, and staged copies a stopped replace left (`staged_leftovers`). A
        write whose writer still runs (a replace's staging writer, `StagedCopy.alive`; a new document's, named by
        its ``writing`` row) is in flight, listed as such, not damage."""
        rows = {r["doc_id"]: r for r in self.store.doc_rows('doc_id != ""', ["doc_id", "source", "n_chunks", "status",
                                                                              "write_id"])}
        writers = {r["doc_id"]: cols.row_writer(r) for r in self.store.doc_rows(
            f'status == "{cols.STATUS_WRITING}"', ["doc_id", "status", "metadata"])}
        by_doc: dict[str, list[dict[str, Any]]] = {}
        for r in self.store.chunk_writes():
            by_doc.setdefault(r["doc_id"], []).append(r)
        copies = self.store.stagings()
        now, grace, beats = time.time(), self.store.writer_grace_s, self.store.beats()
        live = {d for d, c in copies.items() if c.alive(now, grace, beats)}
        report = CheckReport(self.name, 0, sum(len(v) for v in by_doc.values()))
        adding = {d for d, r in rows.items() if r["status"] == cols.STATUS_WRITING
                  and self.store.writer_alive(writers.get(d), now, beats)}
        staging = {d for d, r in rows.items() if d in live and copies[d].write_id == r["write_id"]}
        pending = sorted(d for d, r in rows.items() if r["status"] != cols.STATUS_OK and d not in adding | staging)
        broken: list[str] = []
        orphans: list[str] = []
        for doc_id, row in rows.items():
            got = by_doc.get(doc_id, [])
            if row["status"] == cols.STATUS_OK and (len(got) != int(row["n_chunks"]) or
                                                    any(c["write_id"] != row["write_id"] for c in got)):
                broken.append(f"{doc_id} ({row['source']}): {len(got)} of {row['n_chunks']} chunks from its last write")
        since = {r["doc_id"] for r in self.store.docs_by_id(sorted(set(by_doc) - set(rows)), ["doc_id"])}
        for doc_id, got in by_doc.items():
            if doc_id not in rows and doc_id not in since:  # a row written since they were read: a new document
                orphans.extend(c["chunk_id"] for c in got)
        for doc_id in sorted(adding):
            row = rows[doc_id]
            mine = sum(c["write_id"] == row["write_id"] for c in by_doc.get(doc_id, []))
            report.in_flight.append(f"{row['source'] or doc_id} (doc {doc_id}): a new document, {mine} of "
                                    f"{row['n_chunks']} chunks written, writer "
                                    f"{describe_writer(writers.get(doc_id), now, grace, beats)}")
        report.in_flight += [f"{copies[d].describe(now, grace, beats)} (a replace)" for d in sorted(live)]
        leftovers = staged_leftovers(copies, rows, live, lambda c: c.describe(now, grace, beats))
        report.counts = {"documents": len(rows), "chunks": report.chunks,
                         "staged": sum(c.staged for c in copies.values())}
        report.differences.append(IndexDifference("chunks", missing=sorted(broken), extra=sorted(orphans)))
        report.differences.append(IndexDifference(
            "documents", error=f"{len(pending)} documents with an unfinished write or delete: {pending[:20]}"
            if pending else None))
        report.differences.append(IndexDifference("staged", error=(
            f"{len(leftovers)} staged copies left by a replace that stopped:\n    " + "\n    ".join(leftovers[:20]))
            if leftovers else None))
        return report

    def repair(self) -> RepairReport:
        """Finish or undo every unfinished write and delete now, remove chunks without a document, settle staged
        copies no write uses (a swap whose old version was already being overwritten is finished from its whole
        staged copy; otherwise the stored version stays and the copy is deleted), and drop documents whose chunks
        differ from their last write (ingest them again). A write whose writer still runs (a replace's staging
        writer, a new document's named by its row) is left alone and listed as such."""
        report = RepairReport(self.name)
        fixed = self.store.reconcile(0.0, orphans=True)
        broken = [line.split(" ", 1)[0] for d in self.check().differences if d.index == "chunks" for line in d.missing]
        for doc_id in broken:
            self.store.delete_document(doc_id)
        report.actions["documents"] = (f"finished {len(fixed.finished)} writes, finished {len(fixed.deleted)} deletes, "
                                       f"dropped {len(fixed.dropped) + len(broken)} half-written documents (ingest "
                                       f"them again): {sorted(fixed.dropped + broken)[:20]}")
        report.actions["chunks"] = f"removed {len(fixed.orphans)} chunks without a document"
        staged = [f"{d}: new version swapped in from its whole staged copy (the old one was already being "
                  "overwritten)" for d in fixed.swapped]
        staged += [f"{d}: {what}" for d, what in sorted(fixed.unstaged.items())]
        if staged:
            report.actions["staged"] = "; ".join(staged[:20])
        if fixed.in_flight:
            report.actions["in flight"] = "; ".join(f"{d}: left alone, its writer is still running"
                                                    for d in sorted(set(fixed.in_flight))[:20])
        if fixed.changed or broken:
            report.generation = 0
        return report


def staged_leftovers(copies: dict[str, StagedCopy], rows: dict[str, dict[str, Any]], live: set[str],
                     describe: Callable[[StagedCopy], str]) -> list[str]:
    """``kb check``'s line for each staged copy whose writer is gone, with what ``kb repair`` will do with it."""
    out = []
    for doc_id, copy in sorted(copies.items()):
        if doc_id in live:
            continue
        row = rows.get(doc_id)
        swapping = row is not None and row["status"] == cols.STATUS_SWAPPING and row["write_id"] == copy.write_id
        if swapping and copy.whole:
            todo = "repair swaps the new version in (the old one was already being overwritten)"
        elif row is not None and row["status"] == cols.STATUS_OK and row["write_id"] == copy.write_id:
            todo = "the new version is stored whole: repair deletes the copy"
        elif row is not None and row["status"] == cols.STATUS_OK:
            todo = "the old version is stored whole: repair keeps it and deletes the copy"
        else:
            todo = "repair deletes the copy"
        out.append(f"{describe(copy)}; {todo}")
    return out


def _vectors(chunks: list[IndexedChunk]) -> np.ndarray:
    return np.asarray([c.vector for c in chunks], dtype=np.float32)


class MilvusSink:
    """A knowledge base in Milvus as the ingest pipeline's sink (`ctxrag.indexing.sinks.IngestSink`): each prepared
    document replaced in the two collections (`MilvusResidentStore.write_document`); no generations, nothing to
    commit, and a knowledge base another process deleted meanwhile is `KnowledgeBaseDeleted`."""

    def __init__(self, store: MilvusResidentStore) -> None:
        self.store = store

    def start(self) -> None:
        """Settle what replaces killed earlier left (`MilvusResidentStore.settle_stagings`); nothing to remember:
        every write checks that the collections still exist."""
        with self.store.deletion_named():
            self.store.settle_stagings()

    def _skipped(self, source: str, doc_id: str, content_hash: str) -> tuple[FileOutcome | None, bool]:
        """A ``skipped`` outcome when the document is stored whole with this content; and whether one is stored."""
        with self.store.deletion_named():
            state = self.store.document_state(doc_id)
        if state is not None and state.unchanged(content_hash):
            return FileOutcome(source, "skipped", UNCHANGED, doc_id, state.n_chunks), True
        return None, state is not None

    def unchanged(self, source: str, doc_id: str, content_hash: str) -> FileOutcome | str:
        return self._skipped(source, doc_id, content_hash)[0] or ""

    def write(self, docs: list[PreparedDocument], written_before: int) -> list[FileOutcome]:
        outcomes: list[FileOutcome] = []
        for p in docs:
            skipped, stored = self._skipped(p.source, p.doc_id, p.content_hash)  # another writer may have meanwhile
            if skipped is None:
                self.store.write_document(p.document(), p.records, _vectors(p.indexed))
            outcomes.append(skipped or p.written(replaced=stored))
        return outcomes

    def write_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]],
                      indexed: list[IndexedChunk]) -> None:
        at = 0
        for doc, records in documents:
            self.store.write_document(doc, records, _vectors(indexed[at:at + len(records)]))
            at += len(records)

    def import_precomputed(self, batches: Iterable[list[PrecomputedDocument]]) -> IngestReport:
        """Each batch in one bulk write (`MilvusResidentStore.write_documents`), a stored identical source skipped."""
        report = IngestReport()
        for batch in batches:
            todo = []
            for item in batch:
                doc = item.document
                skipped, stored = self._skipped(doc.source, doc.doc_id, doc.content_hash)
                if skipped is not None:
                    report.files.append(FileOutcome(doc.source, "skipped", UNCHANGED, doc.doc_id, len(item.chunks)))
                    continue
                todo.append((doc, item.chunks, np.asarray(item.vectors, dtype=np.float32)))
                report.files.append(FileOutcome(doc.source, "updated" if stored else "added", "", doc.doc_id,
                                                len(item.chunks)))
            self.store.write_documents(todo)
        return report
