"""The document catalog of a knowledge base: a title and a short summary per document, and a vector index over them.

The router asks the catalog whether the knowledge base covers a question at all (`coverage`), and retrieval can use it
as a first stage that picks documents before chunks (`search`). Summaries are written by the chat model when one is
given (short, on a window of the document) or else extracted (title + first sentences: deterministic, no LLM). They
live in the ``documents.summary`` column of the knowledge base's SQLite; the vectors (title + summary, one row per
document) live in ``kb.root / "catalog"`` as ``vectors.npy`` + ``catalog.json`` (no pickle), written atomically and
rebuilt from SQLite whenever they are missing or stale.

Example::

    from ctxrag import KnowledgeBase
    kb = KnowledgeBase.open("demo")
    catalog = kb.catalog()                  # a `DocumentCatalog`, what the routers and the Assistant read
    catalog.refresh()                       # extractive summaries for documents without one
    catalog.search("默认端口是多少？", k=2)    # [(doc_id, cosine), ...]
    catalog.coverage("tell me a joke")      # max cosine over the catalog
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np
from tqdm.auto import tqdm

from ctxrag.models.embeddings import embed_array
from ctxrag.fileio import atomic_write_bytes, atomic_write_json
from ctxrag.stores.documents.docstore import DocumentRecord
from ctxrag.stores.protocols import KnowledgeSource
from ctxrag.text import detect_language, extractive_summary

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from langchain_core.language_models import BaseChatModel

log = logging.getLogger(__name__)

CATALOG_VERSION = 1
LLM_WINDOW_CHARS = 3000
"""How much of a document the summarising model reads: its start (where titles and abstracts live)."""
SUMMARY_MAX_TOKENS = 120


@dataclass
class CatalogEntry:
    """One document as the catalog sees it."""

    doc_id: str
    source: str
    title: str
    summary: str

    @property
    def text(self) -> str:
        """What gets embedded: title and summary."""
        return f"{self.title}\n{self.summary}" if self.summary and not self.summary.startswith(self.title) else (
            self.summary or self.title)


def llm_summary(llm: BaseChatModel, title: str, text: str, *, max_tokens: int = SUMMARY_MAX_TOKENS) -> str:
    """A 1-2 sentence summary written by `llm` from the start of the document; extractive when the reply is empty."""
    from ctxrag.prompts.router import summary_messages

    window = text[:LLM_WINDOW_CHARS]
    reply = llm.bind(max_tokens=max_tokens).invoke(summary_messages(title, window, detect_language(window)))
    content = str(getattr(reply, "content", reply) or "").strip()
    content = re.sub(r"^(summary|摘要)\s*[:：]\s*", "", content, flags=re.IGNORECASE).strip()
    return content if len(content) >= 10 else extractive_summary(title, text)


def _fingerprint(entries: Iterable[CatalogEntry]) -> str:
    h = hashlib.sha256()
    for e in entries:
        h.update(f"{e.doc_id}\x00{e.text}\x01".encode("utf-8"))
    return h.hexdigest()


class DocumentCatalog:
    """Summaries and a summary-vector index for one `KnowledgeBase` (see the module docstring)."""

    def __init__(self, kb: KnowledgeSource, *, llm: BaseChatModel | None = None) -> None:
        self.kb = kb
        self.llm = llm
        self.dir = kb.root / "catalog"
        self._lock = threading.RLock()
        self._ids: list[str] = []
        self._entries: dict[str, CatalogEntry] = {}
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._fp: str | None = None
        self._rows_key: tuple[tuple[str, str | None, str], ...] | None = None

    # -- summaries ------------------------------------------------------------------------
    def refresh(self, llm: BaseChatModel | None = None, *, force: bool = False, progress: bool = False) -> int:
        """Bring the vector index up to date; with a chat model (`llm` or the catalog's own) also write a summary
        for every document that has none (all of them with `force`). Returns the number of summaries written.

        Only model-written summaries are stored in SQLite: extractive ones are recomputed on the fly (deterministic
        and cheap), so a later refresh with a model still finds the documents it has to summarise."""
        model = llm if llm is not None else self.llm
        written = {}
        if model is not None:
            todo = [d for d in self.kb.documents.list_documents() if force or not (d.summary or "").strip()]
            for doc in tqdm(todo, desc="summaries", unit="doc", disable=not progress):
                written[doc.doc_id] = self._summarise(doc, model)
        if written:
            self.kb.set_summaries(written)
        self._ensure_index()
        return len(written)

    def _summarise(self, doc: DocumentRecord, llm: BaseChatModel) -> str:
        try:
            return llm_summary(llm, doc.title, doc.text)
        except Exception as e:  # noqa: BLE001 - a failing model must not block the catalog
            log.warning("summary of %s by the chat model failed (%s); using an extractive one", doc.source, e)
            return extractive_summary(doc.title, doc.text)

    def entries(self, doc_ids: Iterable[str] | None = None) -> list[CatalogEntry]:
        """Catalog entries (all, or these documents in the given order); missing summaries are extracted on the fly."""
        self._ensure_index()
        if doc_ids is None:
            return [self._entries[i] for i in self._ids]
        return [self._entries[i] for i in doc_ids if i in self._entries]

    def has_written_summary(self, doc_id: str) -> bool:
        """Whether the document has a stored (model-written) summary rather than an extractive one."""
        return bool((self.kb.documents.get_summary(doc_id) or "").strip())

    def summary(self, doc_id: str) -> str:
        self._ensure_index()
        if doc_id not in self._entries:
            raise KeyError(f"document {doc_id!r} is not in the catalog of knowledge base {self.kb.name!r}")
        return self._entries[doc_id].summary

    # -- vector index ---------------------------------------------------------------------
    def _current_entries(self) -> list[CatalogEntry]:
        # a light query (no document texts) runs on every lookup; texts are read only for missing summaries
        rows = self.kb.documents.document_rows()
        key = tuple((r.doc_id, r.summary, r.content_hash) for r in rows)
        if key == self._rows_key:
            return list(self._entries.values())
        out = []
        for doc_id, source, title, summary, _ in rows:
            if not summary or not summary.strip():
                doc = self.kb.documents.get_document(doc_id)
                summary = extractive_summary(title, doc.text if doc else "")
            out.append(CatalogEntry(doc_id, source, title, summary.strip()))
        self._rows_key = key
        return out

    def _ensure_index(self) -> None:
        with self._lock:
            entries = self._current_entries()
            fp = _fingerprint(entries)
            if fp == self._fp:
                return
            self._entries = {e.doc_id: e for e in entries}
            self._ids = [e.doc_id for e in entries]
            if not self._load(fp):
                self._matrix = (embed_array(self.kb.embeddings, [e.text for e in entries])
                                if entries else np.zeros((0, 0), dtype=np.float32))
                self._save(fp)
            self._fp = fp

    def _load(self, fp: str) -> bool:
        meta_path, vec_path = self.dir / "catalog.json", self.dir / "vectors.npy"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("version") != CATALOG_VERSION or meta.get("fingerprint") != fp or meta.get("doc_ids") != self._ids:
                return False
            matrix = np.load(vec_path, allow_pickle=False)
        except (OSError, ValueError):
            return False
        if matrix.shape[0] != len(self._ids):
            return False
        self._matrix = matrix.astype(np.float32, copy=False)
        return True

    def _save(self, fp: str) -> None:
        buf = io.BytesIO()
        np.save(buf, self._matrix, allow_pickle=False)
        try:
            atomic_write_bytes(self.dir / "vectors.npy", buf.getvalue())
            atomic_write_json(self.dir / "catalog.json",
                              {"version": CATALOG_VERSION, "fingerprint": fp, "doc_ids": self._ids})
        except OSError as e:  # a read-only KB still works from memory
            log.warning("could not persist the catalog of %r: %s", self.kb.name, e)

    def similarities(self, query: str, doc_ids: Iterable[str] | None = None, *,
                     query_vector: np.ndarray | None = None) -> list[tuple[str, float]]:
        """(doc_id, cosine of the query to the document's title + summary), all or these documents, best first.
        `query_vector`: the query already embedded (unit, query side), so a caller that has it does not embed again."""
        self._ensure_index()
        if not self._ids:
            return []
        qvec = query_vector if query_vector is not None else embed_array(self.kb.embeddings, [query], is_query=True)[0]
        sims = self._matrix @ qvec
        wanted = None if doc_ids is None else set(doc_ids)
        pairs = [(d, float(s)) for d, s in zip(self._ids, sims) if wanted is None or d in wanted]
        return sorted(pairs, key=lambda p: -p[1])

    def search(self, query: str, k: int = 5, doc_ids: Iterable[str] | None = None) -> list[tuple[str, float]]:
        """Top-k documents for `query` by catalog similarity: [(doc_id, cosine)]."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        return self.similarities(query, doc_ids)[:k]

    def coverage(self, query: str, doc_ids: Iterable[str] | None = None, *,
                 query_vector: np.ndarray | None = None) -> float:
        """How well the knowledge base (or these documents) covers `query`: the max catalog cosine, 0.0 when empty.
        `query_vector` as in `similarities`."""
        sims = self.similarities(query, doc_ids, query_vector=query_vector)
        return sims[0][1] if sims else 0.0

    def __len__(self) -> int:
        self._ensure_index()
        return len(self._ids)
