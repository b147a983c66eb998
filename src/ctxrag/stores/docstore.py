"""SQLite document store: documents, their chunks, and the knowledge base's metadata (current index generation).

All writes of one ingest batch happen in one transaction, committed only after the indexes of the new generation are on
disk, so a crash leaves the previous state intact.
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

SCHEMA_VERSION = "1"

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
    """SQLite store of one knowledge base. Not thread-safe for writes; one writer at a time."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=60)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.executescript(_SCHEMA)
        if self.get_meta("schema_version") is None:
            self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))

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
        """By doc id, exact source, or a unique source suffix (e.g. a file name)."""
        doc = self.get_document(key)
        if doc:
            return doc
        row = self.conn.execute(f"SELECT {self._DOC_COLS} FROM documents WHERE source=?", (key,)).fetchone()
        if row:
            return self._doc(row)
        rows = self.conn.execute(
            f"SELECT {self._DOC_COLS} FROM documents WHERE source LIKE ? ESCAPE '\\'",
            ("%" + key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_"),),
        ).fetchall()
        return self._doc(rows[0]) if len(rows) == 1 else None

    def list_documents(self) -> list[DocumentRecord]:
        return [self._doc(r) for r in self.conn.execute(f"SELECT {self._DOC_COLS} FROM documents ORDER BY source")]

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

    def iter_chunks(self) -> Iterator[ChunkRecord]:
        for r in self.conn.execute(f"SELECT {self._CHUNK_COLS} FROM chunks ORDER BY doc_id, chunk_index"):
            yield self._chunk(r)
