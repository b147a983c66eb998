"""Choosing the dense vector store of a knowledge base (``settings.vector_store``) and keeping self-persisting stores
in step with the committed chunks.

FAISS is written into each generation folder like every other index, so the knowledge base's atomic commit covers it.
Chroma and Milvus persist themselves (``KB/chroma``, ``KB/milvus.db`` or a Milvus server), outside that commit; a
crash between their write and the SQLite commit would leave them out of step. So every time one is opened it is
RECONCILED with SQLite: ids the backend has but SQLite does not are deleted, and chunks SQLite has but the backend
lacks (or holds for a different text, by fingerprint) are re-embedded (embedding cache: cheap) and added.

Example::

    from ctxrag.knowledge_base import KnowledgeBase
    from ctxrag.settings import Settings
    kb = KnowledgeBase.open("demo", Settings(vector_store="chroma"))
    type(kb.dense).__name__       # "ChromaIndex", already reconciled with kb.store
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from ctxrag.errors import ConfigError
from ctxrag.settings import DenseIndexSettings
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.dense import IDS_FILE, FaissIndex

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.knowledge_base import KnowledgeBase

log = logging.getLogger(__name__)

BACKEND_FILE = "backend.json"
"""What a self-persisting store writes into a generation folder instead of its data: where the data lives."""
BACKENDS = ("faiss", "chroma", "milvus")


def text_fingerprint(text: str) -> str:
    """Short hash of the indexed text, stored beside each vector so reconciliation sees a stale vector."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def write_backend_file(directory: Path, info: dict[str, Any]) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / BACKEND_FILE).write_text(json.dumps(info, ensure_ascii=False), encoding="utf-8")


@runtime_checkable
class SelfPersistingIndex(Protocol):
    """A dense index that stores its own data (Chroma, Milvus) and can be reconciled with the document store."""

    name: str

    def fingerprints(self) -> dict[str, str]:
        """chunk id -> `text_fingerprint` of every stored vector."""

    def add(self, chunks: list[IndexedChunk]) -> None: ...

    def delete(self, chunk_ids: list[str]) -> None: ...

    def close(self) -> None: ...


@dataclass
class ReconcileReport:
    """What `reconcile` changed: ids deleted from the backend, ids (re-)added to it."""

    removed: list[str]
    added: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.added)


def reconcile(index: SelfPersistingIndex, kb: "KnowledgeBase") -> ReconcileReport:
    """Make `index` hold exactly the committed chunks of `kb` (see the module docstring)."""
    from ctxrag.models.embeddings import embed_array

    have = index.fingerprints()
    committed = {r.chunk_id: r for r in kb.store.iter_chunks()}
    extra = [cid for cid in have if cid not in committed]
    todo = [r for cid, r in committed.items() if have.get(cid) != text_fingerprint(r.indexed_text)]
    if extra:
        index.delete(extra)
    if todo:
        chunks = [IndexedChunk(r.chunk_id, r.doc_id, r.indexed_text, r.content, dict(r.metadata)) for r in todo]
        vecs = embed_array(kb.embeddings, [c.text for c in chunks])
        for c, v in zip(chunks, vecs):
            c.vector = v
        index.add(chunks)
    report = ReconcileReport(removed=extra, added=[r.chunk_id for r in todo])
    if report.changed:
        log.warning("knowledge base %r: %s store was out of step with the document store; removed %d, re-added %d chunks",
                    kb.name, type(index).__name__, len(report.removed), len(report.added))
    return report


def _load_faiss(directory: Path, config: DenseIndexSettings | None = None) -> FaissIndex | None:
    # a generation written while another backend was configured holds only BACKEND_FILE: rebuild from SQLite
    if (directory / BACKEND_FILE).exists() and not (directory / IDS_FILE).exists():
        log.warning("%s was written by another vector store; rebuilding the FAISS index from the document store", directory)
        return None
    return FaissIndex.load(directory, config)


def dense_factories(kb: "KnowledgeBase") -> tuple[Callable[[], Any], Callable[[Path], Any]]:
    """(make empty, load from generation folder) for the dense index `kb.settings.vector_store` names.

    For Chroma and Milvus both open the backend's own storage and reconcile it with ``kb.store``; the generation folder
    only records where that storage is. A loader returning None means "rebuild from the document store".
    """
    backend = kb.settings.vector_store
    if backend == "faiss":
        config = kb.settings.dense_index
        return (lambda: FaissIndex(config=config)), (lambda directory: _load_faiss(directory, config))
    if backend == "chroma":
        from ctxrag.stores.chroma import ChromaIndex

        def open_chroma(_directory: Path | None = None) -> ChromaIndex:
            index = ChromaIndex(kb.root / "chroma")
            reconcile(index, kb)
            return index

        return open_chroma, open_chroma
    if backend == "milvus":
        from ctxrag.stores.milvus import MilvusIndex

        def open_milvus(_directory: Path | None = None) -> MilvusIndex:
            index = MilvusIndex.for_knowledge_base(kb.name, kb.root, kb.settings)
            reconcile(index, kb)
            return index

        return open_milvus, open_milvus
    raise ConfigError(f"unknown vector_store {backend!r}; choose one of {', '.join(BACKENDS)}")


def open_unreconciled(kb: "KnowledgeBase") -> SelfPersistingIndex | None:
    """The dense store of a self-persisting backend as it is, without reconciling it (for ``ctxrag kb check``);
    None for FAISS, whose index lives in the generation folder."""
    backend = kb.settings.vector_store
    if backend == "chroma":
        from ctxrag.stores.chroma import ChromaIndex

        return ChromaIndex(kb.root / "chroma")
    if backend == "milvus":
        from ctxrag.stores.milvus import MilvusIndex

        return MilvusIndex.for_knowledge_base(kb.name, kb.root, kb.settings)
    return None
