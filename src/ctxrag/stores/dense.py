"""Dense vector index on FAISS: inner product over unit vectors (= cosine), saved with `faiss.write_index`, no pickle.

Example::

    import numpy as np
    from ctxrag.stores.base import IndexedChunk
    from ctxrag.stores.dense import FaissIndex
    idx = FaissIndex(dim=3)
    idx.add([IndexedChunk("a:0", "a", "x", "x", vector=np.array([1, 0, 0], "float32"))])
    idx.search(np.array([1, 0, 0], "float32"), k=1)   # [("a:0", 1.0)]
"""
from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np

from ctxrag.errors import IndexCorruptError
from ctxrag.stores.base import IndexedChunk

INDEX_FILE = "index.faiss"
IDS_FILE = "ids.json"


class FaissIndex:
    """A `ChunkIndex` of unit vectors keyed by chunk id (FAISS `IndexIDMap2` over `IndexFlatIP`)."""

    name = "dense"

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim
        self._index: faiss.IndexIDMap2 | None = None
        self._int_of: dict[str, int] = {}
        self._chunk_of: dict[int, str] = {}
        self._next_id = 0
        if dim is not None:
            self._make(dim)

    def _make(self, dim: int) -> None:
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.dim = dim
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    def __len__(self) -> int:
        return len(self._int_of)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._int_of

    @property
    def chunk_ids(self) -> list[str]:
        return list(self._int_of)

    def add(self, chunks: list[IndexedChunk]) -> None:
        if not chunks:
            return
        missing = [c.chunk_id for c in chunks if c.vector is None]
        if missing:
            raise ValueError(f"FaissIndex.add: chunks without a vector: {missing[:5]}")
        vecs = np.ascontiguousarray(np.stack([np.asarray(c.vector, dtype=np.float32) for c in chunks]))
        if vecs.ndim != 2:
            raise ValueError(f"vectors must be 1-d each, got array of shape {vecs.shape}")
        if self._index is None:
            self._make(vecs.shape[1])
        if vecs.shape[1] != self.dim:
            raise ValueError(f"vector dimension {vecs.shape[1]} does not match the index dimension {self.dim}")
        self.delete([c.chunk_id for c in chunks if c.chunk_id in self._int_of])
        ids = np.arange(self._next_id, self._next_id + len(chunks), dtype=np.int64)
        self._next_id += len(chunks)
        for i, c in zip(ids.tolist(), chunks):
            self._int_of[c.chunk_id] = i
            self._chunk_of[i] = c.chunk_id
        assert self._index is not None
        self._index.add_with_ids(vecs, ids)

    def delete(self, chunk_ids: list[str]) -> None:
        ids = [self._int_of.pop(c) for c in chunk_ids if c in self._int_of]
        if not ids or self._index is None:
            return
        for i in ids:
            self._chunk_of.pop(i, None)
        self._index.remove_ids(np.asarray(ids, dtype=np.int64))

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """Stored vectors of these chunks, in order (for MMR and filters)."""
        if self._index is None or not chunk_ids:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return np.stack([self._index.reconstruct(self._int_of[c]) for c in chunk_ids])

    def search(
        self, vector: np.ndarray, k: int, allowed_chunk_ids: set[str] | None = None
    ) -> list[tuple[str, float]]:
        """Top-k (chunk id, cosine) for a unit query vector; `allowed_chunk_ids` restricts the candidates."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        if self._index is None or not self._int_of:
            return []
        q = np.ascontiguousarray(np.asarray(vector, dtype=np.float32).reshape(1, -1))
        if q.shape[1] != self.dim:
            raise ValueError(f"query vector dimension {q.shape[1]} does not match the index dimension {self.dim}")
        params = None
        if allowed_chunk_ids is not None:
            allowed = np.asarray([self._int_of[c] for c in allowed_chunk_ids if c in self._int_of], dtype=np.int64)
            if allowed.size == 0:
                return []
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))
            k = min(k, int(allowed.size))
        k = min(k, len(self._int_of))
        scores, ids = self._index.search(q, k, params=params) if params else self._index.search(q, k)
        return [(self._chunk_of[int(i)], float(s)) for s, i in zip(scores[0], ids[0]) if i >= 0]

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {"dim": self.dim, "next_id": self._next_id, "ids": [[i, c] for c, i in self._int_of.items()]}
        (directory / IDS_FILE).write_text(json.dumps(meta), encoding="utf-8")
        if self._index is not None:
            faiss.write_index(self._index, str(directory / INDEX_FILE))

    @classmethod
    def load(cls, directory: Path) -> "FaissIndex":
        directory = Path(directory)
        ids_path = directory / IDS_FILE
        try:
            meta = json.loads(ids_path.read_text(encoding="utf-8"))
            dim, next_id, pairs = meta["dim"], int(meta["next_id"]), meta["ids"]
        except FileNotFoundError:
            raise IndexCorruptError(f"{ids_path}: missing dense index id map") from None
        except (ValueError, KeyError, TypeError) as e:
            raise IndexCorruptError(f"{ids_path}: unreadable dense index id map ({e})") from None
        self = cls(dim=None)
        self._next_id = next_id
        if dim is not None:
            index_path = directory / INDEX_FILE
            try:
                index = faiss.read_index(str(index_path))
            except RuntimeError as e:
                raise IndexCorruptError(f"{index_path}: cannot read FAISS index ({str(e).splitlines()[0][:200]})") from None
            if not isinstance(index, faiss.IndexIDMap2):
                index = faiss.downcast_index(index)
            self.dim = int(dim)
            self._index = index
            if index.ntotal != len(pairs):
                raise IndexCorruptError(
                    f"{index_path}: holds {index.ntotal} vectors but {ids_path} maps {len(pairs)} ids"
                )
        for i, c in pairs:
            self._int_of[c] = int(i)
            self._chunk_of[int(i)] = c
        return self
