"""A lock that lets one process at a time open an embedded store (Chroma's `PersistentClient`, a Milvus Lite file).

Neither library supports two processes on one store: each process keeps its own in-memory index (Chroma's HNSW)
or starts its own embedded server (Milvus Lite), so a second process writes over the first one's data or fails with
an obscure error. `SingleProcessLock` turns that into a clear error naming the process that has the store open.
Inside one process it is re-entrant (any number of objects and threads may hold it).

Example::

    from pathlib import Path
    from ctxrag.stores.vectors.process_lock import SingleProcessLock
    lock = SingleProcessLock(Path("/tmp/kb/chroma.process.lock"), "the Chroma store of knowledge base 'demo'")
    lock.acquire()     # KnowledgeBaseLocked if another process holds it
    lock.release()
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import filelock

from ctxrag.errors import KnowledgeBaseLocked


class SingleProcessLock:
    """Exclusive between processes, shared by everything in the process that holds it."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = Path(path)
        self.what = what
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = filelock.FileLock(str(self.path), thread_local=False, is_singleton=True)

    @property
    def holder_path(self) -> Path:
        return self.path.with_name(self.path.name + ".holder")

    def acquire(self) -> None:
        try:
            self._lock.acquire(timeout=0)
        except filelock.Timeout:
            raise KnowledgeBaseLocked(
                f"{self.what} is open in another process ({self._holder()}); Chroma and Milvus Lite allow one "
                "process at a time: close it, or use FAISS (the default) or a Milvus server to share a knowledge base"
            ) from None
        if self._lock.lock_counter == 1:
            info = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:300],
                    "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            try:
                self.holder_path.write_text(json.dumps(info), encoding="utf-8")
            except OSError:
                pass

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release()

    def _holder(self) -> str:
        try:
            info = json.loads(self.holder_path.read_text(encoding="utf-8"))
            return f"pid {info['pid']} on {info['host']}: {info['command']}, since {info['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "unknown process"
