"""Persistent cache of chunk contexts, so re-ingesting unchanged text makes zero LLM calls.

Key: (document hash, chunk hash, model name, prompt version). SQLite in WAL mode; one connection shared by threads
behind a lock; safe to close and reopen, and to open from several processes.

Example::

    from ctxrag.indexing.contexts.cache import ContextCache
    with ContextCache("/tmp/contexts.sqlite") as cache:
        cache.put("dochash", "chunkhash", "qwen", "anthropic-en-v1", "From the 2023 report of ACME.")
        assert cache.get("dochash", "chunkhash", "qwen", "anthropic-en-v1") == "From the 2023 report of ACME."
"""
from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from ctxrag.errors import IndexCorruptError, disk_full, is_disk_full
from ctxrag.settings import get_settings

_SCHEMA = """
CREATE TABLE IF NOT EXISTS contexts (
    doc_hash TEXT NOT NULL,
    chunk_hash TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    context TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (doc_hash, chunk_hash, model, prompt_version)
) WITHOUT ROWID
"""

CacheKey = tuple[str, str, str, str]
"""(doc_hash, chunk_hash, model, prompt_version)"""


class ContextCache:
    """SQLite cache of contexts keyed by (doc hash, chunk hash, model, prompt version).

    Default location: ``settings.cache_dir / "contexts.sqlite"`` (see `ContextCache.default`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
            self._conn.commit()
        except sqlite3.DatabaseError as exc:
            if is_disk_full(exc, self.path):
                raise disk_full(self.path, exc, "the context cache could not be opened.") from exc
            raise IndexCorruptError(f"{self.path}: not a usable context cache ({exc})") from exc

    @classmethod
    def default(cls, settings: object | None = None) -> ContextCache:
        """The cache under ``settings.cache_dir`` (global settings when None)."""
        if settings is None:
            settings = get_settings()
        return cls(Path(settings.cache_dir) / "contexts.sqlite")  # type: ignore[attr-defined]

    def get(self, doc_hash: str, chunk_hash: str, model: str, prompt_version: str) -> str | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT context FROM contexts WHERE doc_hash=? AND chunk_hash=? AND model=? AND prompt_version=?",
                (doc_hash, chunk_hash, model, prompt_version),
            ).fetchone()
        return None if row is None else str(row[0])

    def get_many(self, keys: Iterable[CacheKey]) -> dict[CacheKey, str]:
        """Contexts found for `keys` (missing keys are absent from the result)."""
        found: dict[CacheKey, str] = {}
        for key in keys:
            value = self.get(*key)
            if value is not None:
                found[key] = value
        return found

    def put(self, doc_hash: str, chunk_hash: str, model: str, prompt_version: str, context: str) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO contexts VALUES (?, ?, ?, ?, ?, ?)",
                (doc_hash, chunk_hash, model, prompt_version, context, time.time()),
            )
            self._conn.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM contexts").fetchone()[0])

    def clear(self) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM contexts")
            self._conn.commit()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ContextCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ContextCache({str(self.path)!r})"
