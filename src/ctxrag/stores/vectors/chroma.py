"""Dense index on a persistent Chroma collection (``pip install 'ctxrag[chroma]'``): the same interface as `FaissIndex`.

We always hand Chroma our own vectors and never give it an embedding function, so Chroma's default (which downloads
an ONNX model) is never used; telemetry is off. Chroma's HNSW is approximate: ``ef_search`` (default 256) makes it
exact for collections up to about that many chunks and very close beyond.

Example::

    import numpy as np
    from ctxrag.stores.base import IndexedChunk
    from ctxrag.stores.vectors.chroma import ChromaIndex
    idx = ChromaIndex("/tmp/demo-chroma")
    idx.add([IndexedChunk("a:0", "a", "x", "x", vector=np.array([1, 0, 0], "float32"))])
    idx.search(np.array([1, 0, 0], "float32"), k=1)   # [("a:0", 1.0)]
    idx.close()
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
import warnings
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from ctxrag.errors import ConfigError
from ctxrag.stores.engine.external import text_fingerprint, write_backend_file
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.vectors.process_lock import SingleProcessLock

COLLECTION = "ctxrag_dense"


def _chromadb() -> Any:
    try:
        import chromadb
    except ImportError:
        raise ConfigError("dense_backend='chroma' needs chromadb: pip install 'ctxrag[chroma]'") from None
    return chromadb


def _close_client(client: Any, process_lock: SingleProcessLock | None = None) -> None:
    try:
        close = getattr(client, "close", None)  # chromadb >= 1.x
        if close is not None:
            close()
    finally:
        if process_lock is not None:
            process_lock.release()


class ChromaIndex:
    """A `ChunkIndex` of unit vectors in a Chroma `PersistentClient` collection (cosine space), keyed by chunk id."""

    name = "dense"

    def __init__(
        self, path: str | Path, collection: str = COLLECTION, *, ef_search: int = 256, ef_construction: int = 256
    ) -> None:
        chromadb = _chromadb()
        from chromadb.config import Settings as ChromaSettings

        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.collection_name = collection
        # Chroma keeps its HNSW index in this process's memory: a second process would write over it
        process_lock = SingleProcessLock(self.path.with_name(self.path.name + ".process.lock"),
                                         f"the Chroma store {self.path}")
        process_lock.acquire()
        try:
            self._client = chromadb.PersistentClient(
                path=str(self.path), settings=ChromaSettings(anonymized_telemetry=False, allow_reset=False)
            )
        except BaseException:
            process_lock.release()
            raise
        self._finalizer = weakref.finalize(self, _close_client, self._client, process_lock)
        self._col = self._client.get_or_create_collection(
            collection,
            embedding_function=None,  # never Chroma's default (it downloads a model); we always pass vectors
            configuration={"hnsw": {"space": "cosine", "ef_search": ef_search, "ef_construction": ef_construction}},
        )
        with warnings.catch_warnings():  # Chroma calls "no embedding function" a legacy config; that is what we want
            warnings.simplefilter("ignore", DeprecationWarning)
            space = (self._col.configuration or {}).get("hnsw", {}) or {}
        if space.get("space", "cosine") != "cosine":
            self._finalizer()
            raise ConfigError(f"Chroma collection {collection!r} in {self.path} uses space {space.get('space')!r}, not cosine")
        self._max_batch = int(getattr(self._client, "get_max_batch_size", lambda: 5000)())

    def __len__(self) -> int:
        return int(self._col.count())

    def __contains__(self, chunk_id: object) -> bool:
        return isinstance(chunk_id, str) and bool(self._col.get(ids=[chunk_id], include=[])["ids"])

    def chunk_ids(self) -> list[str]:
        return list(self.fingerprints())

    def add(self, chunks: list[IndexedChunk]) -> None:
        """Add chunks with their vectors; an id already present is replaced (upsert)."""
        if not chunks:
            return
        missing = [c.chunk_id for c in chunks if c.vector is None]
        if missing:
            raise ValueError(f"ChromaIndex.add: chunks without a vector: {missing[:5]}")
        vecs = np.stack([np.asarray(c.vector, dtype=np.float32) for c in chunks])
        if vecs.ndim != 2:
            raise ValueError(f"vectors must be 1-d each, got array of shape {vecs.shape}")
        for start in range(0, len(chunks), self._max_batch):
            part = chunks[start : start + self._max_batch]
            self._col.upsert(
                ids=[c.chunk_id for c in part],
                embeddings=vecs[start : start + len(part)],
                metadatas=[{"chunk_id": c.chunk_id, "doc_id": c.doc_id, "text_hash": text_fingerprint(c.text)} for c in part],
            )

    def delete(self, chunk_ids: list[str]) -> None:
        ids = list(dict.fromkeys(chunk_ids))
        for start in range(0, len(ids), self._max_batch):
            self._col.delete(ids=ids[start : start + self._max_batch])

    def fingerprints(self) -> dict[str, str]:
        """chunk id -> text fingerprint of every stored vector (for reconciliation)."""
        out: dict[str, str] = {}
        offset = 0
        while True:
            got = self._col.get(include=["metadatas"], limit=self._max_batch, offset=offset)
            for cid, md in zip(got["ids"], got["metadatas"] or []):
                out[cid] = str((md or {}).get("text_hash", ""))
            if len(got["ids"]) < self._max_batch:
                return out
            offset += len(got["ids"])

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """Stored vectors of these chunks, in order (for MMR); unknown ids raise KeyError."""
        if not chunk_ids:
            return np.zeros((0, 0), dtype=np.float32)
        got = self._col.get(ids=list(chunk_ids), include=["embeddings"])
        by_id = {cid: np.asarray(v, dtype=np.float32) for cid, v in zip(got["ids"], got["embeddings"])}
        unknown = [c for c in chunk_ids if c not in by_id]
        if unknown:
            raise KeyError(f"chunk ids not in the Chroma index: {unknown[:5]}")
        return np.stack([by_id[c] for c in chunk_ids])

    def search(
        self, vector: np.ndarray, k: int, allowed_chunk_ids: AbstractSet[str] | None = None
    ) -> list[tuple[str, float]]:
        """Top-k (chunk id, cosine) for a unit query vector; `allowed_chunk_ids` restricts the candidates."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        n = len(self)
        if n == 0:
            return []
        where = None
        if allowed_chunk_ids is not None:
            if not allowed_chunk_ids:
                return []
            where = {"chunk_id": {"$in": sorted(allowed_chunk_ids)}}
            k = min(k, len(allowed_chunk_ids))
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        res = self._col.query(query_embeddings=[q], n_results=min(k, n), where=where, include=["distances"])
        # cosine space: distance = 1 - cosine
        return [(cid, float(1.0 - d)) for cid, d in zip(res["ids"][0], res["distances"][0])]

    def save(self, directory: Path) -> None:
        """Chroma persists itself; the generation folder records where."""
        write_backend_file(directory, {"backend": "chroma", "path": str(self.path), "collection": self.collection_name,
                                       "count": len(self)})

    def close(self) -> None:
        """Release the client (Chroma stops its system with the last one). Idempotent; also run on garbage collection."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"ChromaIndex(path={str(self.path)!r}, collection={self.collection_name!r})"
