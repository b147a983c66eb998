"""`MilvusResidentStore`: a whole knowledge base in Milvus (chunks, documents, dense vectors, full-text BM25), shared
by any number of stateless ctxrag processes.

(Over 400 lines on purpose: one store: opening, the write protocol and its reconciliation, reads and searches.)

Writes are Strong (the collections' consistency level), so every process sees a write once it returns; reads use
``read_consistency`` (default Strong as well: a search sees every write acknowledged before it).

Milvus has no multi-row transactions, so a document is replaced in steps, each idempotent:

0. when it replaces a stored version (another write id, status ``ok``): its new chunks are written whole to the
   staging collection (`collections.staging_name`; never searched), so the old version stays whole and listed
   until the new one exists completely somewhere;
1. its documents row is upserted with ``status="writing"``, the new content hash, chunk count and write id (named by
   what is written, `collections.write_id`: two nodes writing the same file agree on it);
2. its chunks are upserted (keyed by chunk id), each carrying that write id;
3. its chunks not in the new set are deleted (``doc_id in [D] and chunk_id not in [...]``);
4. the row is upserted with ``status="ok"``; the staged copy is deleted.

A delete marks the row ``deleting``, deletes the chunks by doc id, then the row. A process killed between steps leaves
a row that is not ``ok``; `reconcile` (run on open for rows older than a grace period, so a write in progress on
another node is left alone, and by ``ctxrag kb repair``) finishes a write whose chunks all arrived (or, for a replace,
whose staged copy is whole: it is written again from there), finishes a delete, and drops a half-written new document
(row and chunks) so the next ingest of its file adds it again. A replace interrupted while staging never touched the
stored version: ``kb repair`` deletes the half-staged copy and the old version stays.

Example::

    from ctxrag.stores.milvus_resident.store import MilvusResidentStore
    store = MilvusResidentStore("/tmp/kb-milvus.db", "demo")
    store.bm25_search("存储空间多大", k=3)          # [(chunk_id, bm25 score), ...]
"""
from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse  # noqa: F401 - pymilvus imports it lazily on a search: two server threads doing that first import
# at once can see a half-initialized module (ImportError: isspmatrix); importing it here, once, avoids the race

from ctxrag.errors import ConfigError, KnowledgeBaseDeleted
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord, DocumentRow
from ctxrag.stores.documents.document_keys import is_blank, pick_by_source
from ctxrag.stores.vectors.milvus import _safe_uri, connect, is_server_uri
from ctxrag.stores.milvus_resident import collections as cols
from ctxrag.stores.milvus_resident.analysis import analyzed_text, check_analysis
from ctxrag.stores.milvus_resident.expressions import NOTHING

log = logging.getLogger(__name__)

BATCH = 1000
TOPK_MAX = 16384
RECONCILE_GRACE_S = 600.0
"""A write not finished after this long is taken as crashed (a live one takes seconds per document)."""
_FULLTEXT_SINCE = (2, 5)


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


class DocumentState(NamedTuple):
    content_hash: str
    status: str
    n_chunks: int

    def unchanged(self, content_hash: str) -> bool:
        """Stored completely with this content hash: ingest skips it."""
        return self.status == cols.STATUS_OK and self.content_hash == content_hash


@dataclass
class ReconcileReport:
    """What `MilvusResidentStore.reconcile` did, by doc id."""

    finished: list[str] = field(default_factory=list)
    """Writes whose chunks had all arrived: stale chunks deleted, marked ok."""
    dropped: list[str] = field(default_factory=list)
    """Half-written documents removed (the next ingest of their file adds them again)."""
    deleted: list[str] = field(default_factory=list)
    """Interrupted deletes finished."""
    orphans: list[str] = field(default_factory=list)
    """Chunk ids without a document, removed."""
    unstaged: list[str] = field(default_factory=list)
    """Documents whose replace stopped while staging: the half-staged new version deleted, the stored one kept."""

    @property
    def changed(self) -> bool:
        return bool(self.finished or self.dropped or self.deleted or self.orphans or self.unstaged)


class MilvusResidentStore:
    """The chunks and documents collections of knowledge base `kb_name` at `uri` (a Milvus Lite file or a server)."""

    def __init__(self, uri: str | Path, kb_name: str, *, token: str | None = None, analysis: str = "ctxrag",
                 read_consistency: str = "Strong", create: bool = True) -> None:
        self.uri = str(uri)
        self.is_server = is_server_uri(self.uri)
        if not self.is_server:
            Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
            self.uri = str(Path(self.uri).resolve())
        self.kb_name = kb_name
        self.read_consistency = read_consistency
        self._create_lock = threading.Lock()
        self.chunks_name, self.docs_name = cols.collection_names(kb_name)
        self.staging_name = cols.staging_name(kb_name)
        self._client, self._finalizer = connect(self, self.uri, token)
        self.analysis = check_analysis(analysis)
        self.fulltext = True
        self.dim: int | None = None
        if self._client.has_collection(self.chunks_name):
            self._adopt_chunks()
        if not self._client.has_collection(self.docs_name):
            if not create:
                return
            self.fulltext = self.server_supports_fulltext()
            schema, index = cols.documents_schema(self._client)
            self._create(self.docs_name, schema, index)
        self._client.load_collection(self.docs_name)

    @property
    def exists(self) -> bool:
        return bool(self._client.has_collection(self.docs_name))

    def _adopt_chunks(self) -> None:
        """An existing chunks collection decides the dimension, the analysis and whether BM25 is there."""
        info = self._client.describe_collection(self.chunks_name)
        fields = {f["name"]: f for f in info["fields"]}
        if "dense" not in fields or "indexed_text" not in fields:
            raise ConfigError(f"Milvus collection {self.chunks_name!r} at {self.where} was not made by ctxrag's "
                              f"Milvus-resident store (fields {sorted(fields)})")
        self.dim = int(fields["dense"]["params"]["dim"])
        self.fulltext = "bm25" in fields
        self.analysis = cols.analysis_of(fields, self.analysis)
        self._client.load_collection(self.chunks_name)

    @property
    def where(self) -> str:
        return _safe_uri(self.uri) if self.is_server else self.uri

    def server_version(self) -> str:
        """What the server says it is ('milvus_lite-3.2.2' for milvus-lite's server, '' when it does not say)."""
        if not self.is_server:
            return "milvus_lite"
        try:
            return str(self._client.get_server_version())
        except Exception:  # noqa: BLE001 - an old or proxied server that does not say
            return ""

    @property
    def lite(self) -> bool:
        """milvus-lite (a file, or its gRPC server): its own analyzers and expression dialect."""
        return self.server_version().startswith("milvus_lite")

    def server_supports_fulltext(self) -> bool:
        """Full-text BM25 needs Milvus 2.5+ (Zilliz Cloud, milvus-lite 3.2 too); a server that does not say is tried."""
        m = re.match(r"v?(\d+)\.(\d+)", self.server_version())
        return m is None or (int(m.group(1)), int(m.group(2))) >= _FULLTEXT_SINCE

    def _ensure_chunks(self, dim: int) -> None:
        with self._create_lock:  # threads of this process: one creates, the others adopt
            self._ensure_chunks_unlocked(dim)

    def _ensure_chunks_unlocked(self, dim: int) -> None:
        if self.dim is not None:
            if dim != self.dim:
                raise ValueError(f"vector dimension {dim} does not match knowledge base {self.kb_name!r}'s {self.dim}")
            return
        if self._client.has_collection(self.chunks_name):  # made by another process meanwhile
            self._adopt_chunks()
            return self._ensure_chunks_unlocked(dim)
        if not self.fulltext:
            log.warning("Milvus at %s has no full-text search (2.5+ needed): knowledge base %r is dense only",
                        self.where, self.kb_name)
        schema, index = cols.chunks_schema(self._client, dim, self.analysis, self.fulltext, lite=self.lite)
        if not self._create(self.chunks_name, schema, index):
            self._adopt_chunks()
            return self._ensure_chunks_unlocked(dim)
        self._client.load_collection(self.chunks_name)
        self.dim = dim

    def _ensure_staging(self) -> None:
        """The staging collection (the chunks schema without BM25), made on the first replace."""
        assert self.dim is not None  # the chunks collection exists: staging follows its dimension
        with self._create_lock:
            if not self._client.has_collection(self.staging_name):
                schema, index = cols.chunks_schema(self._client, self.dim, self.analysis, False, lite=self.lite)
                self._create(self.staging_name, schema, index)
            self._client.load_collection(self.staging_name)

    def _create(self, name: str, schema: Any, index: Any) -> bool:
        """Create a collection (Strong consistency); False when another process created it first (then wait until
        it can be described: the loser of the race adopts the winner's)."""
        try:
            self._client.create_collection(name, schema=schema, index_params=index, consistency_level="Strong",
                                           properties=cols.properties(self.kb_name))
            return True
        except Exception:
            deadline = time.monotonic() + 30
            while True:  # the winner may still be registering it
                try:
                    if self._client.has_collection(name):
                        self._client.describe_collection(name)
                        return False
                except Exception:  # noqa: BLE001 - not described yet: wait
                    pass
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    # -- writes -------------------------------------------------------------------------------------------------
    def write_document(self, doc: DocumentRecord, records: list[ChunkRecord], vectors: np.ndarray) -> None:
        """Replace document `doc` and all its chunks (the four steps of the module docstring)."""
        self.write_documents([(doc, records, vectors)])

    def write_documents(self, items: list[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]]) -> None:
        """`write_document` for many documents, each step one Milvus call per batch (bulk import)."""
        if not items:
            return
        with self.deletion_named():
            if not self.exists:  # never re-create a chunks collection for a knowledge base another process deleted
                raise self._deleted()
            self._write_documents(items)

    @contextlib.contextmanager
    def deletion_named(self) -> Iterator[None]:
        """Within this block, a failure because another process deleted the knowledge base (its collections are
        gone: pymilvus says "collection ... does not exist") is `KnowledgeBaseDeleted`; other failures pass."""
        try:
            yield
        except KnowledgeBaseDeleted:
            raise
        except Exception:
            try:
                gone = not self.exists
            except Exception:  # noqa: BLE001 - the server is unreachable: the original error says more
                gone = False
            if gone:
                raise self._deleted() from None
            raise

    def _deleted(self) -> KnowledgeBaseDeleted:
        return KnowledgeBaseDeleted(self.kb_name, f"from Milvus at {self.where} by another process while this one "
                                                  "was writing to it; ingest again to create it anew")

    def _write_documents(self, items: list[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]]) -> None:
        for doc, records, vectors in items:
            if len(records) != len(vectors):
                raise ValueError(f"document {doc.source!r}: {len(records)} chunks but {len(vectors)} vectors")
        dims = {int(np.asarray(v).shape[1]) for _, r, v in items if len(r)}
        if len(dims) > 1:
            raise ValueError(f"vectors of different dimensions {sorted(dims)} in one write")
        if dims:
            self._ensure_chunks(dims.pop())
        now = time.time()
        prior = {r["doc_id"]: r for r in self._docs_by_id([d.doc_id for d, _, _ in items])}
        old = {d: float(r["added_at"]) for d, r in prior.items()}
        analysis = self.analysis if self.fulltext else None
        for start in range(0, len(items), BATCH):
            part = items[start:start + BATCH]
            replaced = [(doc, records, vectors) for doc, records, vectors in part if doc.doc_id in prior
                        and prior[doc.doc_id]["status"] == cols.STATUS_OK
                        and prior[doc.doc_id]["write_id"] != cols.write_id(doc, records)]
            self._stage(replaced)  # step 0: the stored versions stay whole until the new ones exist whole
            self._put_docs(part, cols.STATUS_WRITING, old, now)
            rows = [cols.chunk_row(r, v, cols.write_id(doc, records), analysis) for doc, records, vectors in part
                    for r, v in zip(records, np.asarray(vectors, dtype=np.float32))]
            self._upsert(self.chunks_name, rows)
            self._delete_stale(part)
            self._put_docs(part, cols.STATUS_OK, old, now)
            self._unstage([doc.doc_id for doc, _, _ in replaced])

    def _upsert(self, collection: str, rows: list[dict[str, Any]]) -> None:
        for at in range(0, len(rows), BATCH):
            self._client.upsert(collection, rows[at:at + BATCH])

    def _stage(self, items: list[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]]) -> None:
        """Step 0: the new chunks of replaced documents into the staging collection (a copy left by an earlier
        interrupted replace of the same documents goes first, so only this write's rows are there)."""
        if not items:
            return
        self._ensure_staging()
        self._unstage([doc.doc_id for doc, _, _ in items])
        self._upsert(self.staging_name, [
            cols.chunk_row(r, v, cols.write_id(doc, records), None) for doc, records, vectors in items
            for r, v in zip(records, np.asarray(vectors, dtype=np.float32))])

    def _unstage(self, doc_ids: list[str]) -> None:
        if doc_ids and self._client.has_collection(self.staging_name):
            for start in range(0, len(doc_ids), BATCH):
                self._client.delete(self.staging_name, filter=f"doc_id in {cols.json_list(doc_ids[start:start + BATCH])}")

    def _staged(self, doc_id: str, write_id: str) -> list[dict[str, Any]]:
        """Staged rows of `doc_id` from write `write_id`, with their vectors."""
        if not self._client.has_collection(self.staging_name):
            return []
        self._client.load_collection(self.staging_name)
        rows = self._client.query(self.staging_name, filter=f"doc_id == {_q(doc_id)}",
                                  output_fields=[*cols.CHUNK_FIELDS, "dense"], consistency_level="Strong")
        return [r for r in rows if r["write_id"] == write_id]

    def _delete_stale(self, items: list[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]]) -> None:
        """Step 3: each document's chunks that are not in its new set. By id, not by write id, so two processes
        writing the same file at once leave its chunks (the last upsert of each id wins), never none."""
        group: list[str] = []
        keep: list[str] = []
        for n, (doc, records, _) in enumerate(items):
            group.append(doc.doc_id)
            keep += [r.chunk_id for r in records]
            if len(keep) >= BATCH or n == len(items) - 1:
                self._delete_chunks(f"doc_id in {cols.json_list(group)}", keep=keep)
                group, keep = [], []

    def _put_docs(self, items: list[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]], status: str,
                  added: dict[str, float], now: float) -> None:
        self._client.upsert(self.docs_name, [
            cols.document_row(doc, n_chunks=len(records), status=status, write_id=cols.write_id(doc, records),
                              added_at=added.get(doc.doc_id, now), updated_at=now) for doc, records, _ in items])

    def _docs_by_id(self, doc_ids: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for start in range(0, len(doc_ids), BATCH):
            out += self.doc_rows(f"doc_id in {cols.json_list(doc_ids[start:start + BATCH])}")
        return out

    def _delete_chunks(self, expr: str, keep: list[str] | None = None) -> None:
        if not self._has_chunks:
            return
        if keep:
            expr = f"{expr} and chunk_id not in {cols.json_list(keep)}"
        self._client.delete(self.chunks_name, filter=expr)

    def delete_document(self, doc_id: str) -> list[str]:
        """Delete a document and its chunks; returns the chunk ids it had ([] for an unknown id)."""
        rows = self.doc_rows(f"doc_id == {_q(doc_id)}")
        if not rows:
            return []
        ids = [r.chunk_id for r in self.chunks_of(doc_id)]
        self.update_row(rows[0], status=cols.STATUS_DELETING, updated_at=time.time())
        self._unstage([doc_id])
        self._delete_chunks(f"doc_id == {_q(doc_id)}")
        self._client.delete(self.docs_name, filter=f"doc_id == {_q(doc_id)}")
        return ids

    def set_summary(self, doc_id: str, summary: str) -> None:
        rows = self.doc_rows(f"doc_id == {_q(doc_id)}")
        if rows:
            self.update_row(rows[0], summary=summary)

    def update_row(self, row: dict[str, Any], **changes: Any) -> None:
        """Upsert a documents row read by `doc_rows` with `changes` applied."""
        self._client.upsert(self.docs_name, [{**row, **changes, "placeholder": [0.0, 0.0]}])

    def reconcile(self, grace_s: float = RECONCILE_GRACE_S, *, orphans: bool = False) -> ReconcileReport:
        """Heal writes and deletes that stopped between steps more than `grace_s` ago (see the module docstring);
        with `orphans`, also remove chunks whose document row is gone (a full scan: ``kb repair``)."""
        report = ReconcileReport()
        cutoff = time.time() - grace_s
        for row in self.doc_rows(f'status != "{cols.STATUS_OK}"'):
            if float(row["updated_at"]) > cutoff:
                continue
            doc_id = row["doc_id"]
            if row["status"] == cols.STATUS_DELETING:
                self._delete_chunks(f"doc_id == {_q(doc_id)}")
                self._client.delete(self.docs_name, filter=f"doc_id == {_q(doc_id)}")
                report.deleted.append(doc_id)
                continue
            got = self._query_chunks(f"doc_id == {_q(doc_id)}", ["chunk_id", "write_id"])
            mine = [r["chunk_id"] for r in got if r["write_id"] == row["write_id"]]
            staged = [] if len(mine) == int(row["n_chunks"]) else self._staged(doc_id, row["write_id"])
            if len(staged) == int(row["n_chunks"]) and staged:  # a replace stopped after staging: write it again
                analysis = self.analysis if self.fulltext else None
                self._upsert(self.chunks_name, [cols.chunk_row(cols.record_of(r), np.asarray(r["dense"]),
                                                               row["write_id"], analysis) for r in staged])
                mine = [r["chunk_id"] for r in staged]
            if len(mine) == int(row["n_chunks"]):
                self._delete_chunks(f"doc_id == {_q(doc_id)}", keep=mine)
                self.update_row(row, status=cols.STATUS_OK)
                self._unstage([doc_id])
                report.finished.append(doc_id)
            else:
                self._delete_chunks(f"doc_id == {_q(doc_id)}")
                self._client.delete(self.docs_name, filter=f"doc_id == {_q(doc_id)}")
                report.dropped.append(doc_id)
        if orphans:
            known = {r.doc_id for r in self.document_rows()}
            stray = [r["chunk_id"] for r in self._iter_chunk_rows(["chunk_id", "doc_id"]) if r["doc_id"] not in known]
            for start in range(0, len(stray), BATCH):
                self._client.delete(self.chunks_name, ids=stray[start:start + BATCH])
            report.orphans = stray
            report.unstaged = self._drop_unfinished_staging()
        if report.changed:
            log.warning("knowledge base %r in Milvus: finished %d interrupted writes, dropped %d half-written documents "
                        "(ingest their files again), finished %d deletes, removed %d orphan chunks", self.kb_name,
                        len(report.finished), len(report.dropped), len(report.deleted), len(report.orphans))
        return report

    def _drop_unfinished_staging(self) -> list[str]:
        """Delete staged copies no write is finishing (their replace stopped while staging; the stored version is
        whole), returning their doc ids. For ``kb repair`` only: a live writer's staging is not told apart."""
        if not self._client.has_collection(self.staging_name):
            return []
        self._client.load_collection(self.staging_name)
        it = self._client.query_iterator(self.staging_name, batch_size=BATCH, filter="", output_fields=["doc_id"])
        staged: set[str] = set()
        try:
            while batch := it.next():
                staged.update(r["doc_id"] for r in batch)
        finally:
            it.close()
        writing = {r["doc_id"] for r in self.doc_rows(f'status == "{cols.STATUS_WRITING}"', ["doc_id"])}
        leftover = sorted(staged - writing)
        self._unstage(leftover)
        return leftover

    def drop(self) -> None:
        """Drop the collections (deleting the knowledge base)."""
        for name in (self.chunks_name, self.docs_name, self.staging_name):
            if self._client.has_collection(name):
                self._client.drop_collection(name)
        self.dim = None

    def close(self) -> None:
        self._finalizer()

    # -- documents ----------------------------------------------------------------------------------------------
    def doc_rows(self, expr: str, fields: list[str] | None = None) -> list[dict[str, Any]]:
        """Documents rows `expr` selects (every field unless `fields` names some)."""
        return list(self._client.query(self.docs_name, filter=expr, output_fields=fields or cols.DOC_FIELDS,
                                       consistency_level=self.read_consistency))

    def _record(self, row: dict[str, Any], with_text: bool = True) -> DocumentRecord:
        text = row.get("text") or (cols.stitch(self.chunks_of(row["doc_id"])) if with_text else "")
        return DocumentRecord(row["doc_id"], row["source"], row["title"], row["content_hash"], text,
                              int(row["n_chunks"]), dict(row["metadata"] or {}), row["summary"] or None,
                              float(row["added_at"]), float(row["updated_at"]))

    def document_state(self, doc_id: str) -> DocumentState | None:
        """Content hash, status and chunk count of a stored document, None when there is none (ingest's skip)."""
        rows = self._client.query(self.docs_name, filter=f"doc_id == {_q(doc_id)}",
                                  output_fields=["content_hash", "status", "n_chunks"],
                                  consistency_level=self.read_consistency)
        return DocumentState(rows[0]["content_hash"], rows[0]["status"], int(rows[0]["n_chunks"])) if rows else None

    def get_document(self, doc_id: str) -> DocumentRecord | None:
        rows = self.doc_rows(f"doc_id == {_q(doc_id)}")
        return self._record(rows[0]) if rows else None

    def find_document(self, key: str) -> DocumentRecord | None:
        """By doc id, exact source, or a whole trailing part of the source path (`ctxrag.stores.document_keys`);
        `AmbiguousDocument` listing them when several documents match, None when none does."""
        if is_blank(key):
            return None
        doc = self.get_document(key)
        if doc is not None:
            return doc
        row = pick_by_source(key, self.document_rows(), source=lambda r: r.source, doc_id=lambda r: r.doc_id)
        return self.get_document(row.doc_id) if row else None

    def list_documents(self) -> list[DocumentRecord]:
        return sorted((self._record(r) for r in self.doc_rows(f'status == "{cols.STATUS_OK}"')),
                      key=lambda d: d.source)

    def document_rows(self) -> list[DocumentRow]:
        rows = self.doc_rows('doc_id != ""', ["doc_id", "source", "title", "summary", "content_hash"])
        return sorted((DocumentRow(r["doc_id"], r["source"], r["title"], r["summary"] or None, r["content_hash"])
                       for r in rows), key=lambda r: r.source)

    def get_summary(self, doc_id: str) -> str | None:
        rows = self._client.query(self.docs_name, filter=f"doc_id == {_q(doc_id)}", output_fields=["summary"],
                                  consistency_level=self.read_consistency)
        return (rows[0]["summary"] or "") if rows else None

    def count(self) -> tuple[int, int]:
        docs = self._client.query(self.docs_name, filter="", output_fields=["count(*)"],
                                  consistency_level=self.read_consistency)
        return int(docs[0]["count(*)"]), self.chunk_count()

    # -- chunks -------------------------------------------------------------------------------------------------
    @property
    def _has_chunks(self) -> bool:
        if self.dim is None and self._client.has_collection(self.chunks_name):
            self._adopt_chunks()  # created by another process since we opened
        return self.dim is not None

    def chunk_count(self) -> int:
        if not self._has_chunks:
            return 0
        res = self._client.query(self.chunks_name, filter="", output_fields=["count(*)"],
                                 consistency_level=self.read_consistency)
        return int(res[0]["count(*)"])

    def _query_chunks(self, expr: str, fields: list[str], limit: int | None = None) -> list[dict[str, Any]]:
        if not self._has_chunks:
            return []
        kwargs: dict[str, Any] = {"limit": limit} if limit else {}
        return list(self._client.query(self.chunks_name, filter=expr, output_fields=fields,
                                       consistency_level=self.read_consistency, **kwargs))

    def _iter_chunk_rows(self, fields: list[str], expr: str = "") -> Iterator[dict[str, Any]]:
        if not self._has_chunks:
            return
        it = self._client.query_iterator(self.chunks_name, batch_size=BATCH, filter=expr, output_fields=fields)
        try:
            while batch := it.next():
                yield from batch
        finally:
            it.close()

    def get_chunks(self, chunk_ids: list[str]) -> dict[str, ChunkRecord]:
        out: dict[str, ChunkRecord] = {}
        if not chunk_ids or not self._has_chunks:
            return out
        for start in range(0, len(chunk_ids), BATCH):
            got = self._client.get(self.chunks_name, ids=list(chunk_ids[start:start + BATCH]),
                                   output_fields=cols.CHUNK_FIELDS, consistency_level=self.read_consistency)
            out.update((r["chunk_id"], cols.record_of(r)) for r in got)
        return out

    def chunks_of(self, doc_id: str) -> list[ChunkRecord]:
        rows = self._query_chunks(f"doc_id == {_q(doc_id)}", cols.CHUNK_FIELDS)
        return sorted((cols.record_of(r) for r in rows), key=lambda r: r.chunk_index)

    def iter_chunks(self, expr: str = "") -> Iterator[ChunkRecord]:
        for row in self._iter_chunk_rows(cols.CHUNK_FIELDS, expr):
            yield cols.record_of(row)

    def chunk_ids(self, expr: str = "") -> set[str]:
        return {r["chunk_id"] for r in self._iter_chunk_rows(["chunk_id"], expr)}

    def fingerprints(self) -> dict[str, str]:
        return {r["chunk_id"]: r["text_hash"] for r in self._iter_chunk_rows(["chunk_id", "text_hash"])}

    def chunk_writes(self) -> Iterator[dict[str, Any]]:
        """chunk id, doc id and write id of every chunk (for ``kb check``)."""
        return self._iter_chunk_rows(["chunk_id", "doc_id", "write_id"])

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """Stored dense vectors of these chunks, in order; `KeyError` for an unknown id."""
        if not chunk_ids or not self._has_chunks:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        by_id: dict[str, np.ndarray] = {}
        for start in range(0, len(chunk_ids), BATCH):
            got = self._client.get(self.chunks_name, ids=list(chunk_ids[start:start + BATCH]),
                                   output_fields=["chunk_id", "dense"], consistency_level=self.read_consistency)
            by_id.update((r["chunk_id"], np.asarray(r["dense"], dtype=np.float32)) for r in got)
        unknown = [c for c in chunk_ids if c not in by_id]
        if unknown:
            raise KeyError(f"chunk ids not in knowledge base {self.kb_name!r} in Milvus: {unknown[:5]}")
        return np.stack([by_id[c] for c in chunk_ids])

    # -- searches -----------------------------------------------------------------------------------------------
    def _hits(self, res: Any, *, magnitude: bool = False) -> list[tuple[str, float]]:
        """(chunk id, score) best first; `magnitude`: BM25, which milvus-lite returns negated (Milvus: positive)."""
        return [(h["entity"].get("chunk_id", h.get("id")), abs(float(h["distance"])) if magnitude
                 else float(h["distance"])) for h in res[0]]

    def _can_match(self, k: int, expr: str) -> bool:
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        return expr != NOTHING and self._has_chunks

    def dense_search(self, vector: np.ndarray, k: int, expr: str = "") -> list[tuple[str, float]]:
        """Top-k (chunk id, cosine) among the chunks `expr` selects ('' = all)."""
        if not self._can_match(k, expr):
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"query vector dimension {q.shape[0]} does not match knowledge base "
                             f"{self.kb_name!r}'s {self.dim}")
        res = self._client.search(self.chunks_name, data=[q.tolist()], anns_field="dense", limit=min(k, TOPK_MAX),
                                  filter=expr, output_fields=["chunk_id"], search_params={"metric_type": "COSINE"},
                                  consistency_level=self.read_consistency)
        return self._hits(res)

    def _query_text(self, query: str) -> str:
        if not self.fulltext:
            raise ConfigError(f"knowledge base {self.kb_name!r} in Milvus at {self.where} has no full-text BM25 (its "
                              "server is older than Milvus 2.5): use --mode dense, or a Milvus 2.5+ server")
        return analyzed_text(query, self.analysis).strip()

    def bm25_search(self, query: str, k: int, expr: str = "", *, fill: bool = False) -> list[tuple[str, float]]:
        """Top-k (chunk id, BM25 score) by Milvus's full-text search; with `fill`, chunks without a query term
        (score 0, primary-key order) up to `k`."""
        text = self._query_text(query)
        if not self._can_match(k, expr):
            return []
        hits: list[tuple[str, float]] = []
        if text:
            res = self._client.search(self.chunks_name, data=[text], anns_field="bm25", limit=min(k, TOPK_MAX),
                                      filter=expr, output_fields=["chunk_id"], search_params={"metric_type": "BM25"},
                                      consistency_level=self.read_consistency)
            hits = [(cid, s) for cid, s in self._hits(res, magnitude=True) if s > 0]
        if fill and len(hits) < k:
            seen = [cid for cid, _ in hits]
            rest = f"chunk_id not in {cols.json_list(seen)}" if seen else ""
            where = " and ".join(f"({e})" for e in (expr, rest) if e)
            hits += [(r["chunk_id"], 0.0) for r in self._query_chunks(where, ["chunk_id"], limit=k - len(hits))]
        return hits

    def hybrid_search(self, vector: np.ndarray, query: str, k: int, expr: str = "", *, ranker: str = "rrf",
                      weights: tuple[float, float] = (0.5, 0.5), rrf_k: int = 60, pool: int | None = None,
                      ) -> list[tuple[str, float]]:
        """Dense + BM25 fused inside Milvus (`hybrid_search`): ``ranker="rrf"`` (RRFRanker(rrf_k)) or
        ``"weighted"`` (WeightedRanker(dense, bm25)); each side fetches `pool` candidates (default ``max(2k, 20)``)."""
        from pymilvus import AnnSearchRequest, RRFRanker, WeightedRanker

        text = self._query_text(query)
        if not self._can_match(k, expr):
            return []
        if not text:
            return self.dense_search(vector, k, expr)
        pool = min(max(pool or 2 * k, k, 20), TOPK_MAX)
        q = np.asarray(vector, dtype=np.float32).reshape(-1).tolist()
        reqs = [AnnSearchRequest(data=[q], anns_field="dense", param={"metric_type": "COSINE"}, limit=pool,
                                 expr=expr or None),
                AnnSearchRequest(data=[text], anns_field="bm25", param={"metric_type": "BM25"}, limit=pool,
                                 expr=expr or None)]
        if ranker == "rrf":
            rank: Any = RRFRanker(rrf_k)
        elif ranker == "weighted":
            rank = WeightedRanker(*weights)
        else:
            raise ConfigError(f"unknown Milvus ranker {ranker!r}; choose 'rrf' or 'weighted'")
        res = self._client.hybrid_search(self.chunks_name, reqs, rank, limit=min(k, TOPK_MAX),
                                         output_fields=["chunk_id"], consistency_level=self.read_consistency)
        return self._hits(res)

    def __repr__(self) -> str:
        return f"MilvusResidentStore(uri={self.where!r}, kb={self.kb_name!r}, analysis={self.analysis!r})"
