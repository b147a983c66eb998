"""Notes: short texts a user keeps (typed, or saved from an answer with its citations), stored in a knowledge base.

Each note is a document of the knowledge base with source ``note://<id>`` and chunk metadata ``collection="notes"``,
``tags`` and ``note_id``, so notes are retrieved like any document (and can be filtered to the notes collection). The
note's own fields (title, text, tags, citations, times) live in ``notes.sqlite`` next to the knowledge base.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.kb.notes import NoteBook
    book = NoteBook(KnowledgeBase.open("demo"))
    n = book.create("混合检索用 RRF 合并向量与 BM25 结果。", title="混合检索", tags=["retrieval"])
    book.tag(n.id, add=["todo"])
    [(note.title, score) for note, score in book.search("RRF 是什么？", k=3)]
    book.from_answer(assistant.invoke("星河知识库支持哪些文件格式？"), tags=["faq"])
"""
from __future__ import annotations

import builtins
import json
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Sequence

from langchain_core.retrievers import BaseRetriever

from ctxrag.enums import SearchMode
from ctxrag.errors import ConfigError, DocumentNotFound
from ctxrag.ingest_report import IngestReport

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.settings import Settings

NOTES_COLLECTION = "notes"
SOURCE_PREFIX = "note://"
_TAG = re.compile(r"^[\w\u4e00-\u9fff][\w\u4e00-\u9fff.-]{0,39}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    tags TEXT NOT NULL,
    citations TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
"""


@dataclass
class Note:
    """One note; ``citations`` are the sources of the answer it was saved from (``n``, ``source``, ``title``, ...)."""

    id: int
    title: str
    text: str
    tags: list[str] = field(default_factory=list)
    citations: list[dict[str, Any]] = field(default_factory=list)
    created: float = 0.0
    updated: float = 0.0

    @property
    def source(self) -> str:
        return f"{SOURCE_PREFIX}{self.id}"

    def indexed_text(self) -> str:
        """What the knowledge base indexes: title, text, tags and the cited sources."""
        parts = [self.title, self.text]
        if self.tags:
            parts.append("Tags: " + ", ".join(self.tags))
        if self.citations:
            parts.append("Sources:\n" + "\n".join(
                f"[{c.get('n', i)}] {c.get('title') or ''} ({c.get('source') or ''})"
                for i, c in enumerate(self.citations, 1)))
        return "\n\n".join(p for p in parts if p)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text, "tags": self.tags,
                "citations": self.citations, "created": self.created, "updated": self.updated, "source": self.source}


def note_id_of(source: str) -> int | None:
    """The note id in a ``note://<id>`` source, else None."""
    if isinstance(source, str) and source.startswith(SOURCE_PREFIX) and source[len(SOURCE_PREFIX):].isdigit():
        return int(source[len(SOURCE_PREFIX):])
    return None


def _clean_tags(tags: Iterable[str]) -> list[str]:
    out: list[str] = []
    for t in tags:
        t = str(t).strip()
        if not _TAG.match(t):
            raise ConfigError(f"invalid tag {t!r}: use 1-40 letters, digits, CJK, '_', '-' or '.'")
        if t not in out:
            out.append(t)
    return out


class NoteHost(Protocol):
    """What a `NoteBook` needs from the knowledge base its notes live in (`KnowledgeBase` is one): a folder for
    ``notes.sqlite``, texts in and out, and search."""

    name: str
    root: Path
    settings: Settings

    def add_texts(self, items: Iterable[Any]) -> IngestReport:
        """Store texts as documents (a source already stored is replaced)."""

    def delete_document(self, key: str) -> Any:
        """Delete a document by source; `DocumentNotFound` when there is none."""

    def as_retriever(self, mode: SearchMode | str = SearchMode.HYBRID, k: int = 10, **kwargs: Any) -> BaseRetriever:
        """A retriever over the knowledge base (``filter`` among the options)."""


class NoteBook:
    """Notes of one knowledge base (a `NoteHost`; see the module docstring)."""

    def __init__(self, kb: NoteHost) -> None:
        self.kb = kb
        self.path = kb.root / "notes.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        # a note add holds this database while it waits for the knowledge base's write lock: wait as long here
        wait = max(60.0, float(kb.settings.write_lock_timeout))
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=wait)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(_SCHEMA)

    def close(self) -> None:
        self.conn.close()

    # -- reading ----------------------------------------------------------------------
    def _note(self, row: tuple[Any, ...]) -> Note:
        return Note(int(row[0]), row[1], row[2], json.loads(row[3]), json.loads(row[4]), row[5], row[6])

    _COLS = "id, title, text, tags, citations, created, updated"

    def get(self, note_id: int) -> Note:
        row = self.conn.execute(f"SELECT {self._COLS} FROM notes WHERE id=?", (int(note_id),)).fetchone()
        if row is None:
            raise DocumentNotFound(f"no note {note_id!r} in knowledge base {self.kb.name!r} (see `ctxrag notes list`)")
        return self._note(row)

    def list(self, tag: str | None = None) -> list[Note]:
        notes = [self._note(r) for r in self.conn.execute(f"SELECT {self._COLS} FROM notes ORDER BY id")]
        return [n for n in notes if tag is None or tag in n.tags]

    def __len__(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM notes").fetchone()[0])

    # -- writing ----------------------------------------------------------------------
    def create(self, text: str, *, title: str | None = None, tags: Iterable[str] = (),
               citations: Sequence[dict[str, Any]] | None = None) -> Note:
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("a note needs non-empty text")
        title = (title or text.strip().splitlines()[0])[:80].strip()
        now = time.time()
        note = Note(0, title, text.strip(), _clean_tags(tags), [dict(c) for c in citations or []], now, now)
        with self._transaction():
            cur = self.conn.execute(
                "INSERT INTO notes(title, text, tags, citations, created, updated) VALUES (?,?,?,?,?,?)",
                (note.title, note.text, json.dumps(note.tags, ensure_ascii=False),
                 json.dumps(note.citations, ensure_ascii=False), now, now))
            assert cur.lastrowid is not None  # sqlite3 sets it after every INSERT
            note.id = cur.lastrowid
            self._index(note)
        return note

    def from_answer(self, answer: dict[str, Any], *, title: str | None = None, tags: Iterable[str] = ()) -> Note:
        """A note from an assistant / RAG answer dict, keeping its cited sources (with a short excerpt each)."""
        text = answer.get("answer") if isinstance(answer, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"from_answer needs a dict with a non-empty 'answer', got {str(answer)[:200]!r}")
        keep = ("n", "source", "title", "chunk_id", "doc_id", "kb", "heading_path")
        citations = []
        for s in answer.get("sources") or []:
            c = {k: s.get(k) for k in keep if s.get(k) is not None}
            if s.get("text"):
                c["excerpt"] = str(s["text"])[:300]
            citations.append(c)
        return self.create(text, title=title or answer.get("question"), tags=tags, citations=citations)

    def edit(self, note_id: int, *, text: str | None = None, title: str | None = None,
             tags: Iterable[str] | None = None) -> Note:
        note = self.get(note_id)
        if text is not None:
            if not text.strip():
                raise ConfigError("a note needs non-empty text")
            note.text = text.strip()
        if title is not None:
            note.title = title.strip()[:80] or note.title
        if tags is not None:
            note.tags = _clean_tags(tags)
        return self._update(note)

    def tag(self, note_id: int, *, add: Iterable[str] = (), remove: Iterable[str] = ()) -> Note:
        note = self.get(note_id)
        drop = set(remove)
        note.tags = [t for t in _clean_tags([*note.tags, *add]) if t not in drop]
        return self._update(note)

    def delete(self, note_id: int) -> Note:
        note = self.get(note_id)
        with self._transaction():
            self.conn.execute("DELETE FROM notes WHERE id=?", (note.id,))
            try:
                self.kb.delete_document(note.source)
            except DocumentNotFound:
                pass
        return note

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """Note rows and their knowledge-base document change together or not at all."""
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def _update(self, note: Note) -> Note:
        note.updated = time.time()
        with self._transaction():
            self.conn.execute("UPDATE notes SET title=?, text=?, tags=?, citations=?, updated=? WHERE id=?",
                              (note.title, note.text, json.dumps(note.tags, ensure_ascii=False),
                               json.dumps(note.citations, ensure_ascii=False), note.updated, note.id))
            self._index(note)
        return note

    def _index(self, note: Note) -> None:
        report = self.kb.add_texts([{
            "text": note.indexed_text(), "source": note.source, "title": note.title, "file_type": "note",
            "metadata": {"collection": NOTES_COLLECTION, "tags": list(note.tags), "note_id": note.id},
        }])
        if report.failed:
            raise ConfigError(f"indexing note {note.id} failed: {report.failed[0].reason}")

    # -- finding ----------------------------------------------------------------------
    def search(self, query: str, k: int = 5, *, tag: str | None = None,
               mode: SearchMode | str = SearchMode.HYBRID) -> builtins.list[tuple[Note, float]]:
        """Notes whose chunks best match `query` (one entry per note, best chunk's score)."""
        if not query.strip():
            raise ConfigError("search needs a non-empty query")

        def in_notes(md: dict[str, Any]) -> bool:
            return md.get("collection") == NOTES_COLLECTION and (tag is None or tag in (md.get("tags") or []))

        hits = self.kb.as_retriever(mode=mode, k=max(k * 3, 10), filter=in_notes).invoke(query)
        out: list[tuple[Note, float]] = []
        seen: set[int] = set()
        for d in hits:
            nid = d.metadata.get("note_id") or note_id_of(d.metadata.get("source", ""))
            if nid is None or nid in seen:
                continue
            try:
                note = self.get(nid)
            except DocumentNotFound:
                continue
            seen.add(nid)
            out.append((note, float(d.metadata.get("score") or 0.0)))
            if len(out) >= k:
                break
        return out

    def select(self, *, ids: Sequence[int] | None = None, tag: str | None = None, query: str | None = None,
               k: int = 8) -> builtins.list[Note]:  # `list` in this class is the method
        """Notes chosen by ids, by tag, or by a query (ids and tag combine as an intersection)."""
        if not ids and tag is None and not query:
            raise ConfigError("choose notes by ids, a tag or a query")
        if query:
            notes = [n for n, _ in self.search(query, k=k, tag=tag)]
        else:
            notes = [self.get(i) for i in ids] if ids else self.list(tag=tag)
        if ids and query:
            wanted = {int(i) for i in ids}
            notes = [n for n in notes if n.id in wanted]
        if tag is not None:
            notes = [n for n in notes if tag in n.tags]
        return notes[:k] if query else notes
