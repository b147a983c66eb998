"""Choosing the dense vector store of a knowledge base (``settings.dense_backend``): FAISS, Chroma or Milvus.

FAISS lives in each generation folder. Chroma and Milvus persist themselves and are reconciled with the committed
chunks every time they are opened (see `ctxrag.stores.engine.external`); the generation folder only records where
their data is. Nothing here knows the knowledge base: callers pass its name, folder, settings, the committed chunks
and an embed function.

Example::

    from pathlib import Path
    from ctxrag.settings import Settings
    from ctxrag.stores.vectors.backends import dense_factories
    make, load = dense_factories(Settings(), "demo", Path("/tmp/kb/demo"), chunks=lambda: [], embed=embed)
    type(make()).__name__          # "FaissIndex"
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ctxrag.errors import ConfigError
from ctxrag.settings import DenseIndexSettings, Settings
from ctxrag.stores.vectors.dense import IDS_FILE, FaissIndex
from ctxrag.stores.documents.docstore import ChunkRecord
from ctxrag.stores.embedding import EmbedFn
from ctxrag.stores.engine.external import BACKEND_FILE, SelfPersistingIndex, reconcile

log = logging.getLogger(__name__)

BACKENDS = ("faiss", "chroma", "milvus")


def _load_faiss(directory: Path, config: DenseIndexSettings | None = None) -> FaissIndex | None:
    # a generation written while another backend was configured holds only BACKEND_FILE: rebuild from SQLite
    if (directory / BACKEND_FILE).exists() and not (directory / IDS_FILE).exists():
        log.warning("%s was written by another vector store; rebuilding the FAISS index from the document store", directory)
        return None
    return FaissIndex.load(directory, config)


def dense_factories(
    settings: Settings, kb_name: str, root: Path, *, chunks: Callable[[], Iterable[ChunkRecord]], embed: EmbedFn,
) -> tuple[Callable[[], Any], Callable[[Path], Any]]:
    """(make empty, load from generation folder) for the dense index `settings.dense_backend` names.

    For Chroma and Milvus both open the backend's own storage and reconcile it with ``chunks()`` (the committed
    chunks, read at that moment). A loader returning None means "rebuild from the document store"."""
    backend = settings.dense_backend
    if backend == "faiss":
        config = settings.dense_index
        return (lambda: FaissIndex(config=config)), (lambda directory: _load_faiss(directory, config))
    if backend not in BACKENDS:
        raise ConfigError(f"unknown dense_backend {backend!r}; choose one of {', '.join(BACKENDS)}")

    def open_reconciled(_directory: Path | None = None) -> SelfPersistingIndex:
        index = open_unreconciled(settings, kb_name, root)
        assert index is not None
        reconcile(index, chunks(), embed, kb_name=kb_name)
        return index

    return open_reconciled, open_reconciled


def open_unreconciled(settings: Settings, kb_name: str, root: Path) -> SelfPersistingIndex | None:
    """The dense store of a self-persisting backend as it is, without reconciling it (for ``ctxrag kb check``);
    None for FAISS, whose index lives in the generation folder."""
    backend = settings.dense_backend
    if backend == "chroma":
        from ctxrag.stores.vectors.chroma import ChromaIndex

        return ChromaIndex(Path(root) / "chroma")
    if backend == "milvus":
        from ctxrag.stores.vectors.milvus import MilvusIndex

        return MilvusIndex.for_knowledge_base(kb_name, Path(root), settings)
    return None


def drop_dense_store(settings: Settings, kb_name: str, root: Path) -> None:
    """Before a knowledge base folder is deleted: drop its dense data that lives outside the folder (a Milvus
    collection on a server or in a shared file); nothing for FAISS and Chroma, whose data is inside it."""
    if settings.dense_backend == "milvus" and settings.milvus_uri:
        from ctxrag.stores.vectors.milvus import MilvusIndex

        index = MilvusIndex.for_knowledge_base(kb_name, Path(root), settings)
        try:
            index.drop()
        finally:
            index.close()
