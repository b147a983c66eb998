"""SQLite document store: documents, their chunks, and the knowledge base's metadata (current index generation).

All writes of one ingest batch happen in one transaction, committed only after the indexes of the new generation are on
disk, so a crash leaves the previous state intact.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from ctxrag.errors import KnowledgeBaseDeleted, StoreCorruptError, disk_full, is_disk_full
from ctxrag.stores.documents.document_keys import is_blank, pick_by_source, source_tail

SCHEMA_VERSION = "1"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_QUICK_CHECK_MAX_BYTES = 256 << 20


def _damaged(path: Path, what: str) -> str:
    return (f"{path}: the document store is damaged ({what}); restore it from a backup, or delete the knowledge "
            f"base folder {path.parent} and ingest again (its index generations were left untouched)")


def _check_file(path: Path) -> None:
    """Refuse an empty, foreign or truncated database file before SQLite would treat it as a new empty one."""
    size = path.stat().st_size
    if size == 0:
        raise StoreCorruptError(_damaged(path, "0 bytes"))
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise StoreCorruptError(_damaged(path, f"{size} bytes, not a SQLite database"))
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid_for, change_counter = header[92:96], header[24:28]
    if valid_for == change_counter and pages and size < pages * page_size:
        raise StoreCorruptError(_damaged(path, f"truncated: {size} bytes, its header says {pages * page_size}"))


def _identity(path: Path) -> tuple[int, int]:
    """Device and inode of the file at `path`: which store a path names right now."""
    st = path.stat()
    return st.st_dev, st.st_ino


def _gone(path: Path, detail: str) -> KnowledgeBaseDeleted:
    return KnowledgeBaseDeleted(path.parent.name, f"{detail} ({path} is gone); open it again, or ingest again to "
                                                  "create a new one")


def _create(path: Path) -> None:
    """Write a complete empty store under a temporary name and link it into place (another process may race us)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:  # created by another process meanwhile: use theirs
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            p.unlink(missing_ok=True)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY,
    source TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    text TEXT NOT NULL,
    summary TEXT,
    n_chunks INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    added_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id TEXT PRIMARY KEY,
    doc_id TEXT NOT NULL REFERENCES documents(doc_id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    content TEXT NOT NULL,
    indexed_text TEXT NOT NULL,
    context TEXT,
    metadata TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id, chunk_index);
"""


@dataclass
class DocumentRecord:
    doc_id: str
    source: str
    title: str
    content_hash: str
    text: str
    n_chunks: int
    metadata: dict[str, Any] = field(default_factory=dict)
    summary: str | None = None
    added_at: float = 0.0
    updated_at: float = 0.0


class DocumentRow(NamedTuple):
    """A document without its text: what the catalog checks on every lookup (cheap to read)."""

    doc_id: str
    source: str
    title: str
    summary: str | None
    content_hash: str


@dataclass
class ChunkRecord:
    chunk_id: str
    doc_id: str
    chunk_index: int
    content: str
    indexed_text: str
    context: str | None
    metadata: dict[str, Any]


class DocStore:
    """SQLite store of one knowledge base. Not thread-safe for writes; one writer at a time.

    A new store is created complete (schema written into a temporary file, then linked into place), so an existing
    ``kb.sqlite`` that is empty, truncated or not SQLite is damage: `StoreCorruptError` says so in one line and
    nothing is re-created over it. `check` runs SQLite's quick_check on stores up to 256 MB. With ``create=False`` a
    missing file is `KnowledgeBaseDeleted` (a writer or reader whose knowledge base was deleted meanwhile).
    `identity` is the device and inode of the file opened; `follow` compares it with what the path names now.
    """

    def __init__(self, path: Path, *, check: bool = True, busy_timeout: float = 60.0, create: bool = True) -> None:
        self.path = Path(path)
        self._check = check
        self._busy_timeout = busy_timeout
        self._reopen_lock = threading.Lock()
        if not self.path.exists():
            if not create:
                raise _gone(self.path, "by another process")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                _create(self.path)
            except (OSError, sqlite3.Error) as e:
                if is_disk_full(e, self.path):
                    raise disk_full(self.path, e, "the document store was not created.") from None
                raise
        self.conn, self.identity = self._connect()

    def _connect(self) -> tuple[sqlite3.Connection, tuple[int, int]]:
        """Open, check and configure a connection; also returns the identity of the file it opened."""
        try:
            before = _identity(self.path)
            if self._check:
                _check_file(self.path)
        except FileNotFoundError:
            raise _gone(self.path, "by another process") from None
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=self._busy_timeout)
        except sqlite3.DatabaseError:
            if not self.path.exists():
                raise _gone(self.path, "by another process") from None
            raise
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"meta", "documents", "chunks"} <= tables:
                raise StoreCorruptError(_damaged(self.path, f"tables {sorted(tables)} instead of the ctxrag schema"))
            if self._check and self.path.stat().st_size <= _QUICK_CHECK_MAX_BYTES:
                result = conn.execute("PRAGMA quick_check(1)").fetchone()
                if not result or result[0] != "ok":
                    raise StoreCorruptError(_damaged(self.path, f"SQLite quick_check says {result[0] if result else None!r}"))
            if _identity(self.path) != before:  # replaced between the stat and the connect: not the file checked
                raise _gone(self.path, "and created again while it was being opened")
        except FileNotFoundError:
            conn.close()
            raise _gone(self.path, "by another process") from None
        except sqlite3.DatabaseError as e:
            conn.close()
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise
            if not self.path.exists():
                raise _gone(self.path, "by another process") from None
            if is_disk_full(e, self.path):  # e.g. no room for the write-ahead log: the file itself is intact
                raise disk_full(self.path, e, "the document store could not be opened.") from None
            raise StoreCorruptError(_damaged(self.path, str(e))) from None
        except (StoreCorruptError, KnowledgeBaseDeleted):
            conn.close()
            raise
        return conn, before

    def follow(self) -> bool:
        """Make sure this object still reads the store its path names (one ``stat``, microseconds).

        `KnowledgeBaseDeleted` when the file is gone (``ctxrag kb delete``); when another store now lives at the path
        (deleted and created again), switch to it and return True. An open connection keeps reading a deleted file,
        so without this a long-lived reader (``ctxrag serve``) would keep answering from a knowledge base that no
        longer exists."""
        try:
            now = _identity(self.path)
        except FileNotFoundError:
            raise _gone(self.path, "by another process") from None
        if now == self.identity:
            return False
        with self._reopen_lock:
            if _identity(self.path) == self.identity:
                return False
            # the old connection is left to the threads still using it (closed when the last one drops it)
            self.conn, self.identity = self._connect()
            return True

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: changes when another connection commits (a cheap staleness probe)."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self.conn.close()

    # -- transactions -----------------------------------------------------------------
    def begin(self) -> None:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    # -- meta -----------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # -- documents ------------------------------------------------------------------
    def upsert_document(self, doc: DocumentRecord, chunks: list[ChunkRecord]) -> None:
        """Replace a document and all its chunks (caller holds the transaction)."""
        now = time.time()
        old = self.get_document(doc.doc_id)
        self.conn.execute("DELETE FROM chunks WHERE doc_id=?", (doc.doc_id,))
        self.conn.execute(
            "INSERT OR REPLACE INTO documents(doc_id, source, title, content_hash, text, summary, n_chunks, metadata,"
            " added_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                doc.doc_id, doc.source, doc.title, doc.content_hash, doc.text, doc.summary, len(chunks),
                json.dumps(doc.metadata, ensure_ascii=False), old.added_at if old else now, now,
            ),
        )
        self.conn.executemany(
            "INSERT INTO chunks(chunk_id, doc_id, chunk_index, content, indexed_text, context, metadata)"
            " VALUES (?,?,?,?,?,?,?)",
            [
                (c.chunk_id, c.doc_id, c.chunk_index, c.content, c.indexed_text, c.context,
                 json.dumps(c.metadata, ensure_ascii=False))
                for c in chunks
            ],
        )

    def delete_document(self, doc_id: str) -> list[str]:
        """Delete a document; returns the ids of its chunks (caller holds the transaction)."""
        ids = [r[0] for r in self.conn.execute("SELECT chunk_id FROM chunks WHERE doc_id=?", (doc_id,))]
        self.conn.execute("DELETE FROM chunks WHERE doc_id=?", (doc_id,))
        self.conn.execute("DELETE FROM documents WHERE doc_id=?", (doc_id,))
        return ids

    def set_summary(self, doc_id: str, summary: str) -> None:
        self.conn.execute("UPDATE documents SET summary=? WHERE doc_id=?", (summary, doc_id))

    def _doc(self, row: tuple) -> DocumentRecord:
        return DocumentRecord(
            doc_id=row[0], source=row[1], title=row[2], content_hash=row[3], text=row[4], summary=row[5],
            n_chunks=row[6], metadata=json.loads(row[7]), added_at=row[8], updated_at=row[9],
        )

    _DOC_COLS = "doc_id, source, title, content_hash, text, summary, n_chunks, metadata, added_at, updated_at"

    def get_document(self, doc_id: str) -> DocumentRecord | None:
        row = self.conn.execute(f"SELECT {self._DOC_COLS} FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        return self._doc(row) if row else None

    def find_document(self, key: str) -> DocumentRecord | None:
        """By doc id, exact source, or a whole trailing part of the source path
        (`ctxrag.stores.documents.document_keys`); `AmbiguousDocument` listing them when several documents match, None
        when none does."""
        if is_blank(key):
            return None
        doc = self.get_document(key)
        if doc:
            return doc
        like = "%" + source_tail(key).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self.conn.execute(  # LIKE narrows (it ignores ASCII case); the match itself is case-sensitive
            f"SELECT {self._DOC_COLS} FROM documents WHERE source=? OR source LIKE ? ESCAPE '\\'", (key, like)).fetchall()
        row = pick_by_source(key, rows, source=lambda r: r[1], doc_id=lambda r: r[0])
        return self._doc(row) if row else None

    def list_documents(self) -> list[DocumentRecord]:
        return [self._doc(r) for r in self.conn.execute(f"SELECT {self._DOC_COLS} FROM documents ORDER BY source")]

    def document_rows(self) -> list[DocumentRow]:
        """Every document without its text, ordered by source."""
        return [DocumentRow(*r) for r in self.conn.execute(
            "SELECT doc_id, source, title, summary, content_hash FROM documents ORDER BY source")]

    def get_summary(self, doc_id: str) -> str | None:
        """The stored summary ("" when none), None when there is no such document."""
        row = self.conn.execute("SELECT summary FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        return None if row is None else (row[0] or "")

    def count(self) -> tuple[int, int]:
        d = self.conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        c = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        return int(d), int(c)

    # -- chunks ---------------------------------------------------------------------
    _CHUNK_COLS = "chunk_id, doc_id, chunk_index, content, indexed_text, context, metadata"

    def _chunk(self, row: tuple) -> ChunkRecord:
        return ChunkRecord(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]))

    def get_chunks(self, chunk_ids: list[str]) -> dict[str, ChunkRecord]:
        out: dict[str, ChunkRecord] = {}
        for i in range(0, len(chunk_ids), 500):
            part = chunk_ids[i : i + 500]
            for row in self.conn.execute(
                f"SELECT {self._CHUNK_COLS} FROM chunks WHERE chunk_id IN ({','.join('?' * len(part))})", part
            ):
                out[row[0]] = self._chunk(row)
        return out

    def chunks_of(self, doc_id: str) -> list[ChunkRecord]:
        return [
            self._chunk(r)
            for r in self.conn.execute(
                f"SELECT {self._CHUNK_COLS} FROM chunks WHERE doc_id=? ORDER BY chunk_index", (doc_id,)
            )
        ]

    def chunk_ids(self) -> set[str]:
        """Every stored chunk id (without texts: what consistency checks compare with the indexes)."""
        return {r[0] for r in self.conn.execute("SELECT chunk_id FROM chunks")}

    def iter_chunks(self) -> Iterator[ChunkRecord]:
        for r in self.conn.execute(f"SELECT {self._CHUNK_COLS} FROM chunks ORDER BY doc_id, chunk_index"):
            yield self._chunk(r)

    def iter_chunks_in_write_order(self) -> Iterator[ChunkRecord]:
        """Chunks in the order their documents were last written: rebuilding an index in this order gives the same
        tie order as the index built by the ingests (BM25 breaks equal scores by insertion order)."""
        cols = ", ".join(f"c.{c.strip()}" for c in self._CHUNK_COLS.split(","))
        for r in self.conn.execute(f"SELECT {cols} FROM chunks c JOIN documents d ON c.doc_id = d.doc_id "
                                   "ORDER BY d.updated_at, d.rowid, c.chunk_index"):
            yield self._chunk(r)
