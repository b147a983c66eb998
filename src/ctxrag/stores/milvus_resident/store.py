"""`MilvusResidentStore`: a whole knowledge base in Milvus (chunks, documents, dense vectors, full-text BM25), shared
by any number of stateless ctxrag processes.

(Over 400 lines on purpose: one store: opening, the write protocol and its reconciliation, reads and searches.)

Writes are Strong (the collections' consistency level), so every process sees a write once it returns; reads use
``read_consistency`` (default Strong as well: a search sees every write acknowledged before it).

Milvus has no multi-row transactions, so a document is replaced in steps, each idempotent:

0. when it replaces a stored version (another write id, status ``ok``): a marker (`staging`: write id, chunk
   count, the writer's host and pid) and the new chunks are written to the staging collection
   (`collections.staging_name`), so the old version stays whole and listed until the new one exists whole there;
1. its documents row is upserted with the new content hash, chunk count and write id (named by what is written,
   `collections.write_id`: two nodes writing the same file agree on it), status ``swapping`` for a replace and
   ``writing`` for a new document (naming its writer: host, pid, when it started). From this one-row write on, readers take a swapping document's chunks from its
   staged copy (searches exclude its rows in the chunks collection and search the staged ones), so they see the
   new version whole while its chunks are overwritten;
2. its chunks are upserted (keyed by chunk id), each carrying that write id;
3. its chunks not in the new set are deleted (``doc_id in [D] and chunk_id not in [...]``);
4. the row is upserted with ``status="ok"`` (readers back on the chunks collection); the staged copy is deleted.

A reader therefore sees the old version until step 1 and the new one from then on, whichever step a ``kill -9``
stops; a later write of the document (an ingest) first finishes a swap it finds. While a document swaps, its BM25
scores come from the staging collection's statistics (a few documents) instead of the whole collection's.

A delete marks the row ``deleting``, deletes the chunks by doc id, then the row. A process killed between steps leaves
a row that is not ``ok``; `reconcile` (run on open for rows older than a grace period, so a write in progress on
another node is left alone, and by ``ctxrag kb repair``) finishes a swap from its staged copy, finishes a write whose
chunks all arrived, finishes a delete, and drops a half-written new document (row and chunks) so the next ingest of
its file adds it again. ``kb repair`` also settles staged copies no write is using (`staging.StagedCopy`: its writer
gone): the stored version (the old one, never touched before step 1; or the new one, after step 4) stays and the copy
is deleted. A staged copy whose writer still runs (on this host its process, on another its heartbeat younger than
the writer grace period) and the swap
it serves are left alone by both, and so is a new document whose ``writing`` row names a writer that still runs
(`ctxrag.stores.milvus_resident.writers`); a row naming none (written before writers were named) is settled as
before.

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
from collections.abc import Callable, Iterator
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
from ctxrag.stores.milvus_resident.staging import CHUNKS_ONLY, MARKER_INDEX, StagedCopy, marker_record
from ctxrag.stores.milvus_resident.writers import (BEATS_PER_GRACE, WRITER_KEYS, Heartbeat, writer_alive,
                                                   writer_now)

log = logging.getLogger(__name__)

BATCH = 1000
TOPK_MAX = 16384
RECONCILE_GRACE_S = 600.0
"""The default writer grace period (``Settings.milvus_writer_grace_s``): a write whose writer cannot be probed (another
host's) and has not beaten its heartbeat for this long is taken as crashed (`writers`)."""
_FULLTEXT_SINCE = (2, 5)


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _and(*exprs: str) -> str:
    return " and ".join(f"({e})" for e in exprs if e)


def _best(hits: list[tuple[str, float]], k: int) -> list[tuple[str, float]]:
    return sorted(hits, key=lambda h: -h[1])[:k]


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
    swapped: list[str] = field(default_factory=list)
    """Replaces stopped after their row said ``swapping`` (the old version already being overwritten): finished from
    their whole staged copy, the new version won (also in `finished`)."""
    unstaged: dict[str, str] = field(default_factory=dict)
    """Staged copies no write is using, deleted (the stored version kept): doc id -> what was done and why."""
    in_flight: list[str] = field(default_factory=list)
    """Documents staged, swapping or (new ones) being written by a writer that still runs: left alone."""

    @property
    def changed(self) -> bool:
        return bool(self.finished or self.dropped or self.deleted or self.orphans or self.unstaged)


class MilvusResidentStore:
    """The chunks and documents collections of knowledge base `kb_name` at `uri` (a Milvus Lite file or a server)."""

    def __init__(self, uri: str | Path, kb_name: str, *, token: str | None = None, analysis: str = "ctxrag",
                 read_consistency: str = "Strong", create: bool = True,
                 writer_grace_s: float = RECONCILE_GRACE_S) -> None:
        if not writer_grace_s > 0:
            raise ValueError(f"writer grace period must be positive seconds, got {writer_grace_s!r}")
        self.writer_grace_s = float(writer_grace_s)
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
        self.writers_name = cols.writers_name(kb_name)
        self._writers_ready = False
        self._staging_bm25: bool | None = None
        """Whether the staging collection has BM25 (None: not looked at yet, or not there)."""
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
        """The staging collection (the chunks schema: readers search a swapping document there), made on the first
        replace."""
        assert self.dim is not None  # the chunks collection exists: staging follows its dimension
        with self._create_lock:
            if not self._client.has_collection(self.staging_name):
                schema, index = cols.chunks_schema(self._client, self.dim, self.analysis, self.fulltext,
                                                   lite=self.lite)
                self._create(self.staging_name, schema, index)
            self._open_staging()

    def _open_staging(self) -> bool:
        """Load the staging collection once per store; False when there is none."""
        if self._staging_bm25 is None:
            if not self._client.has_collection(self.staging_name):
                return False
            fields = {f["name"] for f in self._client.describe_collection(self.staging_name)["fields"]}
            self._client.load_collection(self.staging_name)
            self._staging_bm25 = "bm25" in fields  # a staging collection made before readers searched it has none
        return True

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
        with self._heartbeat() as writer:
            self._write_as(writer, items)

    def _write_as(self, writer: dict[str, Any], items: list[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]]
                  ) -> None:
        now = time.time()
        prior = {r["doc_id"]: r for r in self.docs_by_id([d.doc_id for d, _, _ in items])}
        for doc_id in self._finish_swaps([r for r in prior.values() if r["status"] == cols.STATUS_SWAPPING]):
            prior[doc_id]["status"] = cols.STATUS_OK  # an earlier replace of it stopped mid-swap: finished first
        old = {d: float(r["added_at"]) for d, r in prior.items()}
        analysis = self.analysis if self.fulltext else None
        for start in range(0, len(items), BATCH):
            part = items[start:start + BATCH]
            replaced = [(doc, records, vectors) for doc, records, vectors in part if doc.doc_id in prior
                        and prior[doc.doc_id]["status"] == cols.STATUS_OK
                        and prior[doc.doc_id]["write_id"] != cols.write_id(doc, records)]
            self._stage(replaced, writer)  # step 0: the stored versions stay whole until the new ones exist whole
            swapping = {doc.doc_id for doc, _, _ in replaced}
            self._put_docs(part, cols.STATUS_WRITING, old, now, swapping=swapping,  # step 1: readers flip to staging
                           writer=writer)
            rows = [cols.chunk_row(r, v, cols.write_id(doc, records), analysis) for doc, records, vectors in part
                    for r, v in zip(records, np.asarray(vectors, dtype=np.float32))]
            self._upsert(self.chunks_name, rows)
            self._delete_stale(part)
            self._put_docs(part, cols.STATUS_OK, old, now)
            self._unstage(sorted(swapping))

    @contextlib.contextmanager
    def _heartbeat(self) -> Iterator[dict[str, Any]]:
        """This process as the writer of the write inside the block (`writers.writer_now`). On a Milvus server, which
        processes on other hosts share, the writer beats its heartbeat into the writers collection while the block
        runs (`writers.Heartbeat`) and removes it at the end; a Milvus Lite file has one host, where the pid says."""
        writer = writer_now()
        if not self.is_server:
            yield writer
            return
        self._ensure_writers()
        with Heartbeat(writer, self._beat, self._end_beat, self.writer_grace_s / BEATS_PER_GRACE):
            yield writer

    def _ensure_writers(self) -> None:
        """The writers collection, made and loaded once per store (every write of an ingest beats into it)."""
        with self._create_lock:
            if self._writers_ready:
                return
            if not self._client.has_collection(self.writers_name):
                schema, index = cols.writers_schema(self._client)
                self._create(self.writers_name, schema, index)
            self._client.load_collection(self.writers_name)
            self._writers_ready = True

    def _beat(self, writer: dict[str, Any], at: float) -> None:
        self._client.upsert(self.writers_name, [cols.heartbeat_row(writer, at)])

    def _end_beat(self, writer: dict[str, Any]) -> None:
        self._client.delete(self.writers_name, ids=[str(writer["id"])])

    def beats(self) -> dict[str, float]:
        """writer id -> last heartbeat (epoch seconds) of every write that beats or beat (`writers.writer_alive`)."""
        if not self.is_server or not self._client.has_collection(self.writers_name):
            return {}
        self._client.load_collection(self.writers_name)
        return {r["writer_id"]: float(r["beat"]) for r in self._iter_rows(self.writers_name, ["writer_id", "beat"])}

    def writer_alive(self, writer: dict[str, Any] | None, now: float | None = None,
                     beats: dict[str, float] | None = None) -> bool:
        """`writers.writer_alive` with this store's grace period and heartbeats (`beats`: read now when None)."""
        return writer_alive(writer, now, self.writer_grace_s, self.beats() if beats is None else beats)

    def _forget_beats(self, now: float, beats: dict[str, float]) -> int:
        """Delete heartbeats older than the grace period (writers killed mid-write); how many."""
        old = [w for w, at in beats.items() if now - at >= self.writer_grace_s]
        if old:
            self._client.delete(self.writers_name, ids=old)
        return len(old)

    def _upsert(self, collection: str, rows: list[dict[str, Any]]) -> None:
        for at in range(0, len(rows), BATCH):
            self._client.upsert(collection, rows[at:at + BATCH])

    def _stage(self, items: list[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]],
               writer: dict[str, Any]) -> None:
        """Step 0: a marker, then the new chunks of replaced documents, into the staging collection (a copy left by
        an earlier interrupted replace of the same documents goes first, so only this write's rows are there)."""
        if not items:
            return
        self._ensure_staging()
        self._unstage([doc.doc_id for doc, _, _ in items])
        analysis = self.analysis if self.fulltext and self._staging_bm25 else None
        assert self.dim is not None
        unit = np.eye(1, self.dim, dtype=np.float32)[0]  # a marker is never a search hit (CHUNKS_ONLY), but COSINE
        self._upsert(self.staging_name, [  # needs a vector that is not zero
            cols.chunk_row(marker_record(doc.doc_id, doc.source, len(records), writer), unit, cols.write_id(doc, records),
                           analysis) for doc, records, _ in items])
        self._upsert(self.staging_name, [
            cols.chunk_row(r, v, cols.write_id(doc, records), analysis) for doc, records, vectors in items
            for r, v in zip(records, np.asarray(vectors, dtype=np.float32))])

    def _unstage(self, doc_ids: list[str]) -> None:
        if doc_ids and self._client.has_collection(self.staging_name):
            for start in range(0, len(doc_ids), BATCH):
                self._client.delete(self.staging_name, filter=f"doc_id in {cols.json_list(doc_ids[start:start + BATCH])}")

    def _staged(self, doc_id: str, write_id: str) -> list[dict[str, Any]]:
        """Staged chunk rows of `doc_id` from write `write_id`, with their vectors."""
        if not self._open_staging():
            return []
        return list(self._client.query(
            self.staging_name, filter=f"doc_id == {_q(doc_id)} and write_id == {_q(write_id)} and {CHUNKS_ONLY}",
            output_fields=[*cols.CHUNK_FIELDS, "dense"], consistency_level="Strong"))

    def stagings(self) -> dict[str, StagedCopy]:
        """Every staged copy, by doc id: its write, marker and how many of its chunk rows arrived."""
        if not self._open_staging():
            return {}
        copies: dict[str, StagedCopy] = {}
        for r in self._client.query(self.staging_name, filter=f"chunk_index == {MARKER_INDEX}",
                                    output_fields=["doc_id", "write_id", "metadata"], consistency_level="Strong"):
            md = dict(r["metadata"] or {})
            copies[r["doc_id"]] = StagedCopy(r["doc_id"], str(md.get("source", "")), r["write_id"],
                                             int(md["n_chunks"]), 0, {k: md[k] for k in WRITER_KEYS if k in md})
        it = self._client.query_iterator(self.staging_name, batch_size=BATCH, filter=CHUNKS_ONLY,
                                         output_fields=["doc_id", "write_id", "source"])
        try:
            while batch := it.next():
                for r in batch:
                    copy = copies.setdefault(r["doc_id"], StagedCopy(r["doc_id"], r["source"], r["write_id"], None, 0))
                    copy.staged += r["write_id"] == copy.write_id
        finally:
            it.close()
        return copies

    def _finish_swaps(self, rows: list[dict[str, Any]]) -> list[str]:
        """Finish the swaps of these ``swapping`` rows from their whole staged copies (steps 2-4 again, from the
        staged rows); the doc ids finished. A row whose staged copy is not whole is left as it is."""
        done = []
        for row in rows:
            staged = self._staged(row["doc_id"], row["write_id"])
            if not staged or len(staged) != int(row["n_chunks"]):
                continue
            self._swap_in(row, staged)
            done.append(row["doc_id"])
        return done

    def _swap_in(self, row: dict[str, Any], staged: list[dict[str, Any]]) -> None:
        analysis = self.analysis if self.fulltext else None
        self._upsert(self.chunks_name, [cols.chunk_row(cols.record_of(r), np.asarray(r["dense"]), row["write_id"],
                                                       analysis) for r in staged])
        self._delete_chunks(f"doc_id == {_q(row['doc_id'])}", keep=[r["chunk_id"] for r in staged])
        self.update_row(row, status=cols.STATUS_OK)
        self._unstage([row["doc_id"]])

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
                  added: dict[str, float], now: float, swapping: set[str] | frozenset[str] = frozenset(),
                  writer: dict[str, Any] | None = None) -> None:
        """Upsert the rows of `items` with `status` (``swapping`` for the doc ids in `swapping`); ``writing`` rows
        name `writer` (a swapping one's staging marker does)."""
        self._client.upsert(self.docs_name, [
            cols.document_row(doc, n_chunks=len(records), write_id=cols.write_id(doc, records),
                              status=cols.STATUS_SWAPPING if doc.doc_id in swapping else status,
                              added_at=added.get(doc.doc_id, now), updated_at=now, writer=writer)
            for doc, records, _ in items])

    def docs_by_id(self, doc_ids: list[str], fields: list[str] | None = None) -> list[dict[str, Any]]:
        """The documents rows of these doc ids (those that have one), `fields` as in `doc_rows`."""
        out: list[dict[str, Any]] = []
        for start in range(0, len(doc_ids), BATCH):
            out += self.doc_rows(f"doc_id in {cols.json_list(doc_ids[start:start + BATCH])}", fields)
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
        """Upsert a documents row read by `doc_rows` with `changes` applied (a row no longer ``writing`` names no
        writer)."""
        new = {**row, **changes, "placeholder": [0.0, 0.0]}
        new["metadata"] = cols.with_writer(new.get("metadata"), cols.row_writer(new))
        self._client.upsert(self.docs_name, [new])

    def reconcile(self, grace_s: float | None = None, *, orphans: bool = False) -> ReconcileReport:
        """Heal writes and deletes that stopped between steps more than `grace_s` ago (default: the writer grace
        period; see the module docstring); with `orphans` (``kb repair``), also remove chunks whose document row is
        gone (a full scan), staged copies no write is using and stale heartbeats. A write whose writer still runs
        (named by its staging marker, or by a new document's ``writing`` row; `writers.writer_alive`) is left alone
        either way."""
        report = ReconcileReport()
        grace_s = self.writer_grace_s if grace_s is None else grace_s
        now = time.time()
        rows = [r for r in self.doc_rows(f'status != "{cols.STATUS_OK}"') if float(r["updated_at"]) <= now - grace_s]
        copies = self.stagings() if orphans or any(r["status"] == cols.STATUS_SWAPPING for r in rows) else {}
        beats = self.beats() if rows or copies else {}
        for row in rows:
            doc_id = row["doc_id"]
            copy = copies.get(doc_id)
            if copy is not None and copy.write_id == row["write_id"] and self.writer_alive(copy.writer, now, beats) \
                    or self.writer_alive(cols.row_writer(row), now, beats):
                report.in_flight.append(doc_id)
                continue
            if row["status"] == cols.STATUS_DELETING:
                self._delete_chunks(f"doc_id == {_q(doc_id)}")
                self._unstage([doc_id])
                self._client.delete(self.docs_name, filter=f"doc_id == {_q(doc_id)}")
                report.deleted.append(doc_id)
                continue
            got = self._query_chunks(f"doc_id == {_q(doc_id)}", ["chunk_id", "write_id"])
            mine = [r["chunk_id"] for r in got if r["write_id"] == row["write_id"]]
            staged = [] if len(mine) == int(row["n_chunks"]) else self._staged(doc_id, row["write_id"])
            if len(mine) == int(row["n_chunks"]) or (staged and len(staged) == int(row["n_chunks"])):
                if staged:  # the old version was being overwritten: the whole staged one wins
                    self._swap_in(row, staged)
                else:
                    self._delete_chunks(f"doc_id == {_q(doc_id)}", keep=mine)
                    self.update_row(row, status=cols.STATUS_OK)
                    self._unstage([doc_id])
                report.finished.append(doc_id)
                if staged or row["status"] == cols.STATUS_SWAPPING:
                    report.swapped.append(doc_id)
            else:
                self._delete_chunks(f"doc_id == {_q(doc_id)}")
                self._unstage([doc_id])
                self._client.delete(self.docs_name, filter=f"doc_id == {_q(doc_id)}")
                report.dropped.append(doc_id)
        if orphans:
            stray = self._orphans()
            for start in range(0, len(stray), BATCH):
                self._client.delete(self.chunks_name, ids=stray[start:start + BATCH])
            report.orphans = stray
            done = {*report.finished, *report.dropped, *report.deleted, *report.in_flight}
            beats = self.beats()
            self._settle_stagings([c for d, c in copies.items() if d not in done], now, report, beats)
            self._forget_beats(now, beats)
        if report.changed:
            log.warning("knowledge base %r in Milvus: finished %d interrupted writes (%d from their staged copy), "
                        "dropped %d half-written documents (ingest their files again), finished %d deletes, removed "
                        "%d orphan chunks and %d unused staged copies", self.kb_name, len(report.finished),
                        len(report.swapped), len(report.dropped), len(report.deleted), len(report.orphans),
                        len(report.unstaged))
        return report

    def _orphans(self) -> list[str]:
        """Chunk ids whose document has no row. The rows are read before the chunks, so a document written meanwhile
        (row, then chunks) is looked up again before its chunks count as orphans."""
        known = {r.doc_id for r in self.document_rows()}
        stray = [(r["chunk_id"], r["doc_id"]) for r in self._iter_chunk_rows(["chunk_id", "doc_id"])
                 if r["doc_id"] not in known]
        since = {r["doc_id"] for r in self.docs_by_id(sorted({d for _, d in stray}), ["doc_id"])}
        return [c for c, d in stray if d not in since]

    def settle_stagings(self) -> ReconcileReport:
        """What a writer does first (``ctxrag ingest``): finish the swaps and delete the staged copies that writers
        now gone left (`StagedCopy.alive`), whatever their age; a live writer's are left alone."""
        report = ReconcileReport()
        now = time.time()
        copies = self.stagings()
        beats = self.beats() if copies else {}
        dead = {d: c for d, c in copies.items() if not self.writer_alive(c.writer, now, beats)}
        if not dead:
            return report
        rows = [r for r in self.docs_by_id(sorted(dead))
                if r["status"] == cols.STATUS_SWAPPING and r["write_id"] == dead[r["doc_id"]].write_id]
        report.swapped = self._finish_swaps(rows)
        report.finished = list(report.swapped)
        self._settle_stagings([c for d, c in dead.items() if d not in report.swapped], now, report, beats)
        return report

    def _settle_stagings(self, copies: list[StagedCopy], now: float, report: ReconcileReport,
                         beats: dict[str, float]) -> None:
        """Delete the staged copies whose writer is gone and whose row does not swap to them (the stored version
        stays), noting why in `report`; a copy whose writer runs is left alone."""
        rows = {r["doc_id"]: r for r in self.docs_by_id([c.doc_id for c in copies])}
        for copy in copies:
            row = rows.get(copy.doc_id)
            if self.writer_alive(copy.writer, now, beats):
                report.in_flight.append(copy.doc_id)
                continue
            if row is not None and row["status"] != cols.STATUS_OK:
                continue  # a write younger than the grace period uses it
            if row is None:
                why = "deleted the staged copy (its document is gone)"
            elif row["write_id"] == copy.write_id:
                why = "kept the stored version, deleted the staged copy (the replace stopped after its swap: the " \
                      "new version is stored whole)"
            else:
                why = "kept the stored version, deleted the staged copy (the replace stopped " + \
                      ("after staging, before its swap" if copy.whole else "while staging") + \
                      ": the old version is stored whole)"
            self._unstage([copy.doc_id])
            report.unstaged[copy.doc_id] = why

    def drop(self) -> None:
        """Drop the collections (deleting the knowledge base)."""
        for name in (self.chunks_name, self.docs_name, self.staging_name, self.writers_name):
            if self._client.has_collection(name):
                self._client.drop_collection(name)
        self.dim = None
        self._writers_ready = False

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
                              int(row["n_chunks"]), cols.with_writer(row["metadata"], None), row["summary"] or None,
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
        return sorted((self._record(r) for r in self.doc_rows(f"status in {cols.json_list(list(cols.VISIBLE))}")),
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

    def _iter_rows(self, collection: str, fields: list[str], expr: str = "") -> Iterator[dict[str, Any]]:
        it = self._client.query_iterator(collection, batch_size=BATCH, filter=expr, output_fields=fields)
        try:
            while batch := it.next():
                yield from batch
        finally:
            it.close()

    def _iter_chunk_rows(self, fields: list[str], expr: str = "") -> Iterator[dict[str, Any]]:
        """The chunks collection as stored (a swapping document's rows included: ``kb check``, orphans)."""
        if self._has_chunks:
            yield from self._iter_rows(self.chunks_name, fields, expr)

    # -- what readers see: a swapping document's chunks come from its staged copy (module docstring, step 1) -----
    def _swaps(self) -> dict[str, str]:
        """doc id -> write id of each document whose row says ``swapping`` (one small query; usually none)."""
        rows = self._client.query(self.docs_name, filter=f'status == "{cols.STATUS_SWAPPING}"',
                                  output_fields=["doc_id", "write_id"], consistency_level=self.read_consistency)
        return {r["doc_id"]: r["write_id"] for r in rows} if rows and self._open_staging() else {}

    @staticmethod
    def _sides(expr: str, swaps: dict[str, str]) -> tuple[str, str | None]:
        """(the chunks collection's expression, the staging collection's or None) of a read under `expr`."""
        if not swaps:
            return expr, None
        ids = cols.json_list(sorted(swaps))
        return (_and(expr, f"doc_id not in {ids}"),
                _and(expr, f"doc_id in {ids}", f"write_id in {cols.json_list(sorted(set(swaps.values())))}",
                     CHUNKS_ONLY))

    def _iter_visible(self, fields: list[str], expr: str = "") -> Iterator[dict[str, Any]]:
        main, staged = self._sides(expr, self._swaps())
        yield from self._iter_chunk_rows(fields, main)
        if staged is not None:
            yield from self._iter_rows(self.staging_name, fields, staged)

    def _get(self, collection: str, ids: list[str], fields: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), BATCH):
            got = self._client.get(collection, ids=ids[start:start + BATCH], output_fields=fields,
                                   consistency_level=self.read_consistency)
            out.update((r["chunk_id"], r) for r in got)
        return out

    def _get_visible(self, chunk_ids: list[str], fields: list[str]) -> dict[str, dict[str, Any]]:
        """Rows of these chunk ids as readers see them; a swapping document's from its staged copy."""
        fields = sorted({*fields, "chunk_id", "doc_id", "write_id", "chunk_index"})
        swaps = self._swaps()
        rows = self._get(self.chunks_name, chunk_ids, fields)
        if not swaps:
            return rows
        held = {c: r for c, r in rows.items() if r["doc_id"] in swaps}
        rows = {c: r for c, r in rows.items() if r["doc_id"] not in swaps}
        staged = {c: r for c, r in self._get(self.staging_name, [c for c in chunk_ids if c not in rows], fields).items()
                  if swaps.get(r["doc_id"]) == r["write_id"] and r["chunk_index"] != MARKER_INDEX}
        rows.update(staged)
        ended = {r["doc_id"] for r in held.values()} - {r["doc_id"] for r in staged.values()}
        if ended:  # the swap finished (staged copy deleted) since `_swaps`: the chunks collection is whole again
            rows.update(self._get(self.chunks_name, [c for c, r in held.items() if r["doc_id"] in ended], fields))
        return rows

    def get_chunks(self, chunk_ids: list[str]) -> dict[str, ChunkRecord]:
        if not chunk_ids or not self._has_chunks:
            return {}
        return {c: cols.record_of(r) for c, r in self._get_visible(list(chunk_ids), cols.CHUNK_FIELDS).items()}

    def chunks_of(self, doc_id: str) -> list[ChunkRecord]:
        write = self._swaps().get(doc_id)
        rows = [] if write is None else list(self._client.query(
            self.staging_name, filter=f"doc_id == {_q(doc_id)} and write_id == {_q(write)} and {CHUNKS_ONLY}",
            output_fields=cols.CHUNK_FIELDS, consistency_level=self.read_consistency))
        rows = rows or self._query_chunks(f"doc_id == {_q(doc_id)}", cols.CHUNK_FIELDS)
        return sorted((cols.record_of(r) for r in rows), key=lambda r: r.chunk_index)

    def iter_chunks(self, expr: str = "") -> Iterator[ChunkRecord]:
        for row in self._iter_visible(cols.CHUNK_FIELDS, expr):
            yield cols.record_of(row)

    def chunk_ids(self, expr: str = "") -> set[str]:
        return {r["chunk_id"] for r in self._iter_visible(["chunk_id"], expr)}

    def fingerprints(self) -> dict[str, str]:
        return {r["chunk_id"]: r["text_hash"] for r in self._iter_visible(["chunk_id", "text_hash"])}

    def chunk_writes(self) -> Iterator[dict[str, Any]]:
        """chunk id, doc id and write id of every chunk in the chunks collection (for ``kb check``)."""
        return self._iter_chunk_rows(["chunk_id", "doc_id", "write_id"])

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """Stored dense vectors of these chunks, in order; `KeyError` for an unknown id."""
        if not chunk_ids or not self._has_chunks:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        got = self._get_visible(list(chunk_ids), ["chunk_index", "dense"])
        unknown = [c for c in chunk_ids if c not in got]
        if unknown:
            raise KeyError(f"chunk ids not in knowledge base {self.kb_name!r} in Milvus: {unknown[:5]}")
        return np.stack([np.asarray(got[c]["dense"], dtype=np.float32) for c in chunk_ids])

    # -- searches -----------------------------------------------------------------------------------------------
    def _hits(self, res: Any, *, magnitude: bool = False) -> list[tuple[str, float]]:
        """(chunk id, score) best first; `magnitude`: BM25, which milvus-lite returns negated (Milvus: positive)."""
        return [(h["entity"].get("chunk_id", h.get("id")), abs(float(h["distance"])) if magnitude
                 else float(h["distance"])) for h in res[0]]

    def _can_match(self, k: int, expr: str) -> bool:
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        return expr != NOTHING and self._has_chunks

    def _both(self, expr: str, k: int, search: Callable[[str, str], list[tuple[str, float]]], *,
              bm25: bool = False) -> list[tuple[str, float]]:
        """`search(collection, expression)` over the chunks collection and, when documents swap, over their staged
        copies too (the best `k` of both)."""
        main, staged = self._sides(expr, self._swaps())
        hits = search(self.chunks_name, main)
        if staged is not None and (self._staging_bm25 or not bm25):
            hits = _best(hits + search(self.staging_name, staged), k)
        return hits

    def dense_search(self, vector: np.ndarray, k: int, expr: str = "") -> list[tuple[str, float]]:
        """Top-k (chunk id, cosine) among the chunks `expr` selects ('' = all)."""
        if not self._can_match(k, expr):
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"query vector dimension {q.shape[0]} does not match knowledge base "
                             f"{self.kb_name!r}'s {self.dim}")

        def search(collection: str, where: str) -> list[tuple[str, float]]:
            return self._hits(self._client.search(
                collection, data=[q.tolist()], anns_field="dense", limit=min(k, TOPK_MAX), filter=where,
                output_fields=["chunk_id"], search_params={"metric_type": "COSINE"},
                consistency_level=self.read_consistency))

        return self._both(expr, k, search)

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

        def search(collection: str, where: str) -> list[tuple[str, float]]:
            res = self._client.search(collection, data=[text], anns_field="bm25", limit=min(k, TOPK_MAX),
                                      filter=where, output_fields=["chunk_id"], search_params={"metric_type": "BM25"},
                                      consistency_level=self.read_consistency)
            return [(cid, s) for cid, s in self._hits(res, magnitude=True) if s > 0]

        hits = self._both(expr, k, search, bm25=True) if text else []
        if fill and len(hits) < k:
            seen = [cid for cid, _ in hits]
            rest = f"chunk_id not in {cols.json_list(seen)}" if seen else ""
            where = _and(self._sides(expr, self._swaps())[0], rest)
            hits += [(r["chunk_id"], 0.0) for r in self._query_chunks(where, ["chunk_id"], limit=k - len(hits))]
        return hits

    def hybrid_search(self, vector: np.ndarray, query: str, k: int, expr: str = "", *, ranker: str = "rrf",
                      weights: tuple[float, float] = (0.5, 0.5), rrf_k: int = 60, pool: int | None = None,
                      ) -> list[tuple[str, float]]:
        """Dense + BM25 fused inside Milvus (`hybrid_search`): ``ranker="rrf"`` (RRFRanker(rrf_k)) or
        ``"weighted"`` (WeightedRanker(dense, bm25)); each side fetches `pool` candidates (default ``max(2k, 20)``).
        A swapping document's staged chunks are fused apart and merged by score."""
        from pymilvus import AnnSearchRequest, RRFRanker, WeightedRanker

        text = self._query_text(query)
        if not self._can_match(k, expr):
            return []
        if not text:
            return self.dense_search(vector, k, expr)
        pool = min(max(pool or 2 * k, k, 20), TOPK_MAX)
        q = np.asarray(vector, dtype=np.float32).reshape(-1).tolist()
        if ranker == "rrf":
            rank: Any = RRFRanker(rrf_k)
        elif ranker == "weighted":
            rank = WeightedRanker(*weights)
        else:
            raise ConfigError(f"unknown Milvus ranker {ranker!r}; choose 'rrf' or 'weighted'")

        def search(collection: str, where: str) -> list[tuple[str, float]]:
            reqs = [AnnSearchRequest(data=[q], anns_field="dense", param={"metric_type": "COSINE"}, limit=pool,
                                     expr=where or None),
                    AnnSearchRequest(data=[text], anns_field="bm25", param={"metric_type": "BM25"}, limit=pool,
                                     expr=where or None)]
            return self._hits(self._client.hybrid_search(collection, reqs, rank, limit=min(k, TOPK_MAX),
                                                         output_fields=["chunk_id"],
                                                         consistency_level=self.read_consistency))

        return self._both(expr, k, search, bm25=True)

    def __repr__(self) -> str:
        return f"MilvusResidentStore(uri={self.where!r}, kb={self.kb_name!r}, analysis={self.analysis!r})"
