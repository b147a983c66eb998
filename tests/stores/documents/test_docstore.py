"""The document store on a full disk: opening, creating and writing that run out of space say the disk is full and
that nothing was lost, never that the store is damaged. Real SQLite: SQLite's own SQLITE_FULL comes from
``PRAGMA max_page_count`` (the store may not grow), an ``OSError`` ENOSPC from a patched write; the real disk is
never filled."""
from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from ctxrag.kb import maintenance as kb_maintenance
from ctxrag.errors import DiskFullError, is_disk_full
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
from ctxrag.stores.documents.docstore import DocStore
from ctxrag.stores.engine.generations import GenerationStore


def _enospc(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_is_recognised_from_sqlite_and_os_errors(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "small.sqlite")
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(sqlite3.OperationalError) as full:
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 4000,)] * 10)
        conn.commit()
    conn.close()
    assert is_disk_full(full.value) and is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_disk_full(sqlite3.DatabaseError("file is not a database")) and not is_disk_full(OSError(errno.EIO, "x"))
    # SQLite's plain I/O error is a full disk only where the file system is (nearly) full; here it has room
    assert not is_disk_full(sqlite3.OperationalError("disk I/O error"), tmp_path)


def test_creating_a_store_on_a_full_disk_says_so_and_leaves_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(DiskFullError) as e:
        DocStore(tmp_path / "kb" / "kb.sqlite")
    assert "the disk is full" in str(e.value) and "Nothing was lost" in str(e.value)
    assert "damaged" not in str(e.value) and "delete" not in str(e.value)
    assert list((tmp_path / "kb").iterdir()) == []  # no half-made store, no temporary file


def test_opening_a_store_without_room_for_its_log_is_not_damage(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kb" / "kb.sqlite"
    DocStore(path).close()
    real_connect = sqlite3.connect

    class NoRoomForWal:  # a connection whose WAL setup finds the disk full, as SQLite reports it
        def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
            self.conn = real_connect(*args, **kwargs)

        def execute(self, sql: str, *args):  # noqa: ANN002, ANN201
            if "journal_mode" in sql:
                raise sqlite3.OperationalError("database or disk is full")
            return self.conn.execute(sql, *args)

        def close(self) -> None:
            self.conn.close()

    monkeypatch.setattr(sqlite3, "connect", NoRoomForWal)
    with pytest.raises(DiskFullError) as e:
        DocStore(path)
    assert "the disk is full" in str(e.value) and "damaged" not in str(e.value)
    monkeypatch.undo()
    DocStore(path).close()  # intact: opens once there is room


@pytest.mark.parametrize("where", ["sqlite", "index files"])
def test_ingest_on_a_full_disk_keeps_what_was_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        where: str) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("The Falcon-7 pump moves forty litres per minute.", encoding="utf-8")
    (docs / "b.txt").write_text("Valve V2 opens at three bar.", encoding="utf-8")
    settings = Settings(home=tmp_path / "h", embeddings={"provider": "fake"}, contextualize=False)
    kb = KnowledgeBase.open("full", settings)
    assert len(kb.ingest([docs], progress=False).added) == 2
    (docs / "c.txt").write_text("Pump P-3 " * 3000, encoding="utf-8")
    if where == "sqlite":  # SQLite's real SQLITE_FULL: the store may not grow by a page
        begin = DocStore.begin

        def begin_full(self: DocStore) -> None:
            pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
            self.conn.execute(f"PRAGMA max_page_count = {pages}")
            begin(self)

        monkeypatch.setattr(DocStore, "begin", begin_full)
    else:
        monkeypatch.setattr(GenerationStore, "write", _enospc)
    with pytest.raises(DiskFullError) as e:
        kb.ingest([docs], progress=False)
    assert "the disk is full" in str(e.value) and "Nothing was lost" in str(e.value)
    assert "damaged" not in str(e.value)
    monkeypatch.undo()
    kb.close()
    kb = KnowledgeBase.open("full", settings)
    try:
        assert sorted(Path(d.source).name for d in kb.list_documents()) == ["a.txt", "b.txt"]
        assert kb_maintenance.check(kb).clean
        assert len(kb.ingest([docs], progress=False).added) == 1  # with room again, the same command completes
    finally:
        kb.close()
