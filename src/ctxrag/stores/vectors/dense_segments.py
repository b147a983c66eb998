"""`SegmentedDenseIndex`: the FAISS dense index as immutable segments (see `ctxrag.stores.engine.segments`).

A search asks every segment for its top-k (tombstones are hidden from a segment's searches by a FAISS id selector,
never written into it) and keeps the best k over all, so flat (exact) segments answer exactly what one merged flat
index would. Fresh segments are small and flat; a merge builds the kind the dense settings choose for its size
(HNSW past ``hnsw_threshold``), from the stored vectors, never re-embedding.

Example::

    import numpy as np
    from ctxrag.stores.base import IndexedChunk
    from ctxrag.stores.vectors.dense import FaissIndex
    index = SegmentedDenseIndex("dense", FaissIndex, FaissIndex.load)
    index.add([IndexedChunk("a:0", "a", "x", "x", vector=np.array([1, 0, 0], "float32"))])
    index.search(np.array([1, 0, 0], "float32"), k=1)   # [("a:0", 1.0)]
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
from collections import defaultdict
from typing import cast

import numpy as np

from ctxrag.stores.base import ChunkIndex, IndexedChunk
from ctxrag.stores.protocols import DenseIndex
from ctxrag.stores.engine.segments import SegmentedIndex

_BLOCK = 50_000


class SegmentedDenseIndex(SegmentedIndex):
    """A `DenseIndex` over segments of FAISS indexes, searched together."""

    tombstones_in_index = True
    reopens = True

    def hide_in(self, index: ChunkIndex, chunk_ids: list[str]) -> None:
        hide = getattr(index, "hide", None)
        if hide is None:  # not FAISS: a plain delete
            index.delete(chunk_ids)
        else:  # never `delete`: it would read a memory-mapped segment into memory to change it
            hide(chunk_ids)

    @property
    def dim(self) -> int | None:
        for index, _ in self.parts():
            return cast(int | None, getattr(index, "dim", None))
        return None

    @property
    def kind(self) -> str:
        """The FAISS kind of the largest segment (``flat`` or ``hnsw``)."""
        parts = [index for index, _ in self.parts()]
        return str(getattr(max(parts, key=len), "kind", "flat")) if parts else "flat"

    def search(
        self, vector: np.ndarray, k: int, allowed_chunk_ids: AbstractSet[str] | None = None
    ) -> list[tuple[str, float]]:
        """Top-k (chunk id, cosine) over every segment; `allowed_chunk_ids` restricts the candidates."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        hits: list[tuple[float, int, int, str]] = []
        for pos, (index, dead) in enumerate(self.parts()):
            part = cast(DenseIndex, index)
            if allowed_chunk_ids is not None:
                allowed = allowed_chunk_ids - dead if dead else allowed_chunk_ids
                found = part.search(vector, k, allowed_chunk_ids=allowed) if allowed else []
            else:
                found = [h for h in part.search(vector, k + len(dead)) if h[0] not in dead][:k]
            hits.extend((-score, pos, rank, cid) for rank, (cid, score) in enumerate(found))
        hits.sort()
        return [(cid, -neg) for neg, _, _, cid in hits[:k]]

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """Stored vectors of these chunks, in order."""
        if not chunk_ids:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        where: dict[int, list[int]] = defaultdict(list)
        parts = [cast(DenseIndex, index) for index, _ in self.parts()]
        for i, cid in enumerate(chunk_ids):
            for pos in range(len(parts) - 1, -1, -1):  # newest first: a re-added chunk lives in the newest
                if cid in parts[pos]:
                    where[pos].append(i)
                    break
            else:
                raise KeyError(cid)
        out = np.zeros((len(chunk_ids), self.dim or 0), dtype=np.float32)
        for pos, rows in where.items():
            out[rows] = parts[pos].vectors([chunk_ids[i] for i in rows])
        return out

    def merged(self, parts: list[tuple[ChunkIndex, set[str]]]) -> ChunkIndex:
        out = self._make()
        for index, dead in parts:
            ids = [c for c in index.chunk_ids() if c not in dead]
            part = cast(DenseIndex, index)
            for start in range(0, len(ids), _BLOCK):
                block = ids[start:start + _BLOCK]
                vecs = part.vectors(block)
                out.add([IndexedChunk(c, "", "", "", vector=v) for c, v in zip(block, vecs)])
        return out
