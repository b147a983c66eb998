"""Dense stores that persist themselves outside the generation folder (Chroma, Milvus), and reconciling them with
the committed chunks.

FAISS is written into each generation folder like every other index, so the knowledge base's atomic commit covers it.
Chroma and Milvus persist themselves (``KB/chroma``, ``KB/milvus.db`` or a Milvus server), outside that commit; a
crash between their write and the SQLite commit would leave them out of step. So every time one is opened it is
RECONCILED with the committed chunks: ids the store has but the chunks do not are deleted, and chunks it lacks (or
holds for a different text, by `text_fingerprint`) are re-embedded (embedding cache: cheap) and added. `reconcile`
takes the chunks and an embed function, never the knowledge base.

Example::

    from ctxrag.stores.vectors.chroma import ChromaIndex
    from ctxrag.stores.documents.docstore import DocStore
    from ctxrag.stores.engine.external import reconcile
    index = ChromaIndex(kb_root / "chroma")
    report = reconcile(index, DocStore(kb_root / "kb.sqlite").iter_chunks(), embed)
    report.removed, report.added
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.documents.docstore import ChunkRecord
from ctxrag.stores.embedding import EmbedFn, embed_chunks

log = logging.getLogger(__name__)

BACKEND_FILE = "backend.json"
"""What a self-persisting store writes into a generation folder instead of its data: where the data lives."""


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


def reconcile(
    index: SelfPersistingIndex, chunks: Iterable[ChunkRecord], embed: EmbedFn, *, kb_name: str = ""
) -> ReconcileReport:
    """Make `index` hold exactly the committed `chunks` (see the module docstring); `kb_name` is for the warning."""
    have = index.fingerprints()
    committed = {r.chunk_id: r for r in chunks}
    extra = [cid for cid in have if cid not in committed]
    todo = [r for cid, r in committed.items() if have.get(cid) != text_fingerprint(r.indexed_text)]
    if extra:
        index.delete(extra)
    if todo:
        index.add(embed_chunks(todo, embed))
    report = ReconcileReport(removed=extra, added=[r.chunk_id for r in todo])
    if report.changed:
        log.warning("knowledge base %r: %s store was out of step with the document store; removed %d, re-added %d chunks",
                    kb_name, type(index).__name__, len(report.removed), len(report.added))
    return report
