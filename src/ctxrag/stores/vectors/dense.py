"""Dense vector index on FAISS: inner product over unit vectors (= cosine), saved with `faiss.write_index`, no pickle.

Exact (``IndexFlatIP``) while small; HNSW (``IndexHNSWFlat``, approximate) for large knowledge bases, chosen by
`DenseIndexSettings` (``kind="auto"`` switches once the index reaches ``hnsw_threshold`` vectors). Both sit in an
``IndexIDMap2`` keyed by int ids mapped to chunk ids. FAISS's HNSW cannot remove vectors, so a delete there leaves a
tombstone that searches skip (an id selector) until tombstones pass a fifth of the index and the graph is rebuilt from
the live vectors. Filters are FAISS id selectors; a filter that leaves few candidates is answered exactly.
A saved index is opened as a memory map (``IO_FLAG_MMAP_IFC``), read into memory only before its first write.

Example::

    import numpy as np
    from ctxrag.stores.base import IndexedChunk
    from ctxrag.stores.vectors.dense import FaissIndex
    idx = FaissIndex(dim=3)
    idx.add([IndexedChunk("a:0", "a", "x", "x", vector=np.array([1, 0, 0], "float32"))])
    idx.search(np.array([1, 0, 0], "float32"), k=1)   # [("a:0", 1.0)]
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
import copy
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ctxrag.errors import IndexCorruptError
from ctxrag.settings import DenseIndexSettings
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.engine.id_map import ID_MAP_FILE, IdMap
from ctxrag.stores.engine.mapped import MappedFile, advise_huge_pages

if TYPE_CHECKING:  # pragma: no cover
    import faiss

INDEX_FILE = "index.faiss"
IDS_FILE = "ids.json"
INT_IDS_FILE = "int_ids.npy"
CHUNK_IDS_FILE = "chunk_ids.txt"
"""The id map as saved before `ID_MAP_FILE` (int ids, and one chunk id per line); still read."""
KINDS = ("flat", "hnsw")
EXACT_FILTER_LIMIT = 20_000
"""A filtered HNSW search with at most this many allowed vectors scores them all exactly (fast, and never starved)."""
_TOMBSTONE_FRACTION = 0.2
_BLOCK = 50_000


@lru_cache(maxsize=1)
def _faiss_threads() -> int:
    """FAISS's OpenMP thread count as the process started (restored after a one-thread query)."""
    import faiss  # imported by the first index that needs it: `import ctxrag` and BM25-only work never load FAISS

    return faiss.omp_get_max_threads()


def _mmap_flag() -> int:
    """Map flat vectors in place instead of copying them (FAISS 1.10+); 0 (a plain read) on older FAISS."""
    import faiss

    return getattr(faiss, "IO_FLAG_MMAP_IFC", 0)


@contextmanager
def _one_thread() -> Iterator[None]:
    """One query at a time gains nothing from OpenMP, and on a busy machine its thread barriers cost far more than
    the search itself (spinning threads wait for a core). The OpenMP thread count is per calling thread, so this does
    not slow a build running in another thread."""
    import faiss

    threads = _faiss_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


class FaissIndex:
    """A `ChunkIndex` of unit vectors keyed by chunk id (FAISS `IndexIDMap2` over `IndexFlatIP` or `IndexHNSWFlat`)."""

    name = "dense"

    def __init__(self, dim: int | None = None, config: DenseIndexSettings | None = None) -> None:
        self.config = config or DenseIndexSettings()
        self.kind = "hnsw" if self.config.kind == "hnsw" else "flat"
        self.dim = dim
        self._index: faiss.IndexIDMap2 | None = None
        self._ids = IdMap()
        self._dead: set[int] = set()  # HNSW tombstones: int ids still in the graph but deleted
        self._skip: faiss.IDSelector | None = None  # the selector of `_dead`, built once per change
        self._next_id = 0
        self._mapped_from: MappedFile | None = None  # loaded as a read-only memory map of this file
        if dim is not None:
            self._make(dim)

    def _new_index(self, dim: int, kind: str) -> faiss.IndexIDMap2:
        import faiss

        if kind == "hnsw":
            inner = faiss.IndexHNSWFlat(dim, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.config.hnsw_ef_construction
            inner.hnsw.efSearch = self.config.hnsw_ef_search
        else:
            inner = faiss.IndexFlatIP(dim)
        return faiss.IndexIDMap2(inner)  # the Python wrapper keeps `inner` alive

    def _make(self, dim: int) -> None:
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.dim = dim
        self._index = self._new_index(dim, self.kind)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._ids

    def chunk_ids(self) -> list[str]:
        return self._ids.chunk_ids()

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
        self._writable()
        self.delete([c.chunk_id for c in chunks if c.chunk_id in self._ids])
        if (self.config.kind == "auto" and self.kind == "flat"
                and len(self._ids) + len(chunks) >= self.config.hnsw_threshold):
            self.rebuild("hnsw")
        ids = np.arange(self._next_id, self._next_id + len(chunks), dtype=np.int64)
        self._next_id += len(chunks)
        for i, c in zip(ids.tolist(), chunks):
            self._ids.put(c.chunk_id, i)
        assert self._index is not None
        for start in range(0, len(chunks), _BLOCK):
            self._index.add_with_ids(vecs[start : start + _BLOCK], ids[start : start + _BLOCK])

    def delete(self, chunk_ids: list[str]) -> None:
        ids = [i for i in map(self._ids.pop, chunk_ids) if i is not None]
        if not ids or self._index is None:
            return
        if self.kind == "flat":
            self._writable()
            self._index.remove_ids(np.asarray(ids, dtype=np.int64))
            return
        self._dead.update(ids)  # HNSW cannot remove: tombstone, compact when they pile up
        self._skip = None
        if len(self._dead) > max(1000, _TOMBSTONE_FRACTION * self._index.ntotal):
            self.rebuild(self.kind)

    def hide(self, chunk_ids: list[str]) -> None:
        """Drop chunks from this index's searches without changing the FAISS data (a tombstone in a read-only,
        memory-mapped segment, see `ctxrag.stores.vectors.dense_segments`): they leave the id maps and an id selector
        skips them."""
        ids = [i for i in map(self._ids.pop, chunk_ids) if i is not None]
        if ids:
            self._dead.update(ids)
            self._skip = None

    def fork(self) -> FaissIndex:
        """A copy for another generation of a sealed segment: it shares the FAISS data (only ever hidden from, never
        written: see `hide`) and has its own id map and tombstones. Costs the tombstones, not the vectors."""
        out = copy.copy(self)
        out._ids = self._ids.copy()
        out._dead = set(self._dead)
        return out

    def freeze(self) -> None:
        """Move the id map into arrays (a segment just sealed: `fork` then copies nothing per chunk)."""
        self._ids = self._ids.frozen()

    def _skip_dead(self) -> faiss.IDSelector | None:
        if not self._dead:
            return None
        if self._skip is None:
            import faiss

            batch = faiss.IDSelectorBatch(np.fromiter(self._dead, dtype=np.int64, count=len(self._dead)))
            self._skip = faiss.IDSelectorNot(batch)  # the faiss wrapper keeps `batch` referenced from it
        return self._skip

    def _writable(self) -> None:
        """A memory-mapped index is read-only (FAISS aborts the process on a write into it): before the first write,
        read the file into memory, or, if that file is gone (another process committed a newer generation), copy
        the vectors out of the mapping into a new index."""
        if self._mapped_from is None or self._index is None:
            return
        self._mapped_from.check()  # a truncated mapping would be SIGBUS below
        path, self._mapped_from = self._mapped_from.path, None
        import faiss

        try:
            self._index = faiss.read_index(str(path))
        except RuntimeError:
            self.rebuild(self.kind)

    def rebuild(self, kind: str) -> None:
        """Rebuild the FAISS index as `kind` (``flat`` or ``hnsw``) from the live vectors (drops tombstones)."""
        if kind not in KINDS:
            raise ValueError(f"unknown dense index kind {kind!r}; choose one of {', '.join(KINDS)}")
        old = self._index
        self.kind = kind
        self._dead = set()
        self._skip = None
        if old is None or self.dim is None:
            return
        new = self._new_index(self.dim, kind)
        ids = self._ids.int_ids()
        for start in range(0, len(ids), _BLOCK):
            part = ids[start : start + _BLOCK]
            new.add_with_ids(np.ascontiguousarray(old.reconstruct_batch(part)), part)
        self._index = new

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """Stored vectors of these chunks, in order (for MMR and filters)."""
        if self._index is None or not chunk_ids:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        if self._mapped_from is not None:
            self._mapped_from.check()
        return np.stack([self._index.reconstruct(self._int_id(c)) for c in chunk_ids])

    def _int_id(self, chunk_id: str) -> int:
        found = self._ids.get(chunk_id)
        if found is None:
            raise KeyError(chunk_id)
        return found

    def search(
        self, vector: np.ndarray, k: int, allowed_chunk_ids: AbstractSet[str] | None = None
    ) -> list[tuple[str, float]]:
        """Top-k (chunk id, cosine) for a unit query vector; `allowed_chunk_ids` restricts the candidates."""
        with _one_thread():
            return self._search(vector, k, allowed_chunk_ids)

    def _search(self, vector: np.ndarray, k: int, allowed_chunk_ids: AbstractSet[str] | None) -> list[tuple[str, float]]:
        import faiss

        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        if self._index is None or not len(self._ids):
            return []
        if self._mapped_from is not None:
            self._mapped_from.check()  # a file truncated under the mapping: a named error, not SIGBUS
        q = np.ascontiguousarray(np.asarray(vector, dtype=np.float32).reshape(1, -1))
        if q.shape[1] != self.dim:
            raise ValueError(f"query vector dimension {q.shape[1]} does not match the index dimension {self.dim}")
        k = min(k, len(self._ids))
        allowed: np.ndarray | None = None
        if allowed_chunk_ids is not None:
            allowed = self._ids.ints(allowed_chunk_ids)
            if allowed.size == 0:
                return []
            k = min(k, int(allowed.size))
        if self.kind == "flat":
            if allowed is None and self._dead:  # hidden (flat deletes remove the vectors instead)
                skip = self._skip_dead()
                scores, ids = self._index.search(q, k, params=faiss.SearchParameters(sel=skip))
            elif allowed is None:
                scores, ids = self._index.search(q, k)
            else:
                sel = faiss.IDSelectorBatch(allowed)
                scores, ids = self._index.search(q, k, params=faiss.SearchParameters(sel=sel))
            return self._hits(scores[0], ids[0])
        if allowed is not None and allowed.size <= EXACT_FILTER_LIMIT:
            return self._exact(q[0], allowed, k)
        params = faiss.SearchParametersHNSW()
        ef = max(self.config.hnsw_ef_search, k)
        if allowed is not None:  # a selective filter needs a wider search to find k allowed neighbours
            ef = min(max(ef, 16 * k), ef * math.ceil(len(self._ids) / allowed.size))
            sel = faiss.IDSelectorBatch(allowed)
        elif self._dead:
            sel = self._skip_dead()
        else:
            sel = None
        params.efSearch = ef
        if sel is not None:
            params.sel = sel
        scores, ids = self._index.search(q, k, params=params)
        hits = self._hits(scores[0], ids[0])
        if len(hits) < k and allowed is not None:  # the graph walk was starved by the filter
            return self._exact(q[0], allowed, k)
        return hits

    def _hits(self, scores: np.ndarray, ids: np.ndarray) -> list[tuple[str, float]]:
        found = ids >= 0
        try:  # one vectorized lookup for the page (every segment of a search pays it)
            return list(zip(self._ids.chunks(ids[found]), scores[found].tolist()))
        except KeyError:  # an id no longer mapped (hidden and removed ids are excluded by the search itself)
            pass
        out = []
        for s, i in zip(scores.tolist(), ids.tolist()):
            cid = self._ids.chunk(i) if i >= 0 else None
            if cid is not None:
                out.append((cid, float(s)))
        return out

    def _exact(self, q: np.ndarray, allowed: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Brute force over the allowed vectors (block by block), for small filters on HNSW."""
        assert self._index is not None
        best_ids = np.zeros(0, dtype=np.int64)
        best = np.zeros(0, dtype=np.float32)
        for start in range(0, len(allowed), _BLOCK):
            part = allowed[start : start + _BLOCK]
            scores = self._index.reconstruct_batch(part) @ q
            best_ids = np.concatenate([best_ids, part])
            best = np.concatenate([best, scores])
            if len(best) > k:
                top = np.argpartition(-best, k - 1)[:k]
                best_ids, best = best_ids[top], best[top]
        order = np.lexsort((best_ids, -best))[:k]
        return [(self._ids.chunk(int(best_ids[i])) or "", float(best[i])) for i in order]

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta: dict[str, object] = {"dim": self.dim, "next_id": self._next_id, "kind": self.kind,
                                   "dead": sorted(self._dead), "count": len(self._ids)}
        self._ids.save(directory / ID_MAP_FILE)  # arrays: a million ids open without a Python object each
        (directory / IDS_FILE).write_text(json.dumps(meta), encoding="utf-8")
        if self._index is not None:
            import faiss

            # through Python's file object, so a full disk raises OSError(ENOSPC) instead of FAISS's RuntimeError
            with open(directory / INDEX_FILE, "wb") as out:
                faiss.write_index(self._index, faiss.PyCallbackIOWriter(out.write))

    @classmethod
    def load(cls, directory: Path, config: DenseIndexSettings | None = None) -> "FaissIndex":
        directory = Path(directory)
        ids_path = directory / IDS_FILE
        try:
            meta = json.loads(ids_path.read_text(encoding="utf-8"))
            dim, next_id = meta["dim"], int(meta["next_id"])
            kind, dead = meta.get("kind", "flat"), [int(i) for i in meta.get("dead", [])]
            ids = _load_id_map(directory, meta)
        except FileNotFoundError as e:
            raise IndexCorruptError(f"{ids_path}: missing dense index id map ({Path(str(e.filename)).name})") from None
        except (ValueError, KeyError, TypeError, OSError) as e:
            raise IndexCorruptError(f"{ids_path}: unreadable dense index id map ({e})") from None
        if kind not in KINDS:
            raise IndexCorruptError(f"{ids_path}: unknown dense index kind {kind!r}")
        self = cls(dim=None, config=config)
        self.kind = kind  # the saved kind wins; `auto` may still switch flat -> hnsw on a later add
        self._next_id = next_id
        self._dead = set(dead)
        if dim is not None:
            import faiss

            index_path = directory / INDEX_FILE
            mmap_flag = _mmap_flag()
            try:  # memory-mapped: a million vectors open in a blink, pages come in as queries touch them
                index = faiss.read_index(str(index_path), mmap_flag)
            except RuntimeError as e:
                raise IndexCorruptError(f"{index_path}: cannot read FAISS index ({str(e).splitlines()[0][:200]})") from None
            if not isinstance(index, faiss.IndexIDMap2):
                index = faiss.downcast_index(index)
            self.dim = int(dim)
            self._index = index
            self._mapped_from = MappedFile(index_path) if mmap_flag else None
            if mmap_flag:
                advise_huge_pages(index_path)
            if index.ntotal != len(ids) + len(dead):
                raise IndexCorruptError(
                    f"{index_path}: holds {index.ntotal} vectors but {ids_path} maps {len(ids)} ids"
                    f" and {len(dead)} tombstones"
                )
        self._ids = ids
        return self


def _load_id_map(directory: Path, meta: dict[str, object]) -> IdMap:
    """The saved id map: ``id_map.npz``, or the formats before it (int ids plus one chunk id per line; JSON pairs in
    ``ids.json``). `ValueError`/`OSError` when damaged (the caller names the file)."""
    if "ids" in meta:  # JSON pairs: the oldest saves, and ids with newlines before `id_map.npz`
        pairs = sorted((int(i), str(c)) for i, c in meta["ids"])  # type: ignore[union-attr]
        return IdMap.from_arrays([i for i, _ in pairs], [c for _, c in pairs])
    if not (directory / ID_MAP_FILE).exists() and (directory / CHUNK_IDS_FILE).exists():
        int_ids = np.load(directory / INT_IDS_FILE, allow_pickle=False)
        text = (directory / CHUNK_IDS_FILE).read_text(encoding="utf-8")
        chunk_ids = text.split("\n") if text or len(int_ids) else []
        if len(int_ids) != len(chunk_ids) or len(chunk_ids) != int(meta["count"]):  # type: ignore[call-overload]
            raise ValueError(f"{len(int_ids)} int ids, {len(chunk_ids)} chunk ids, count {meta['count']}")
        return IdMap.from_arrays(int_ids, chunk_ids)
    ids = IdMap.load(directory / ID_MAP_FILE)
    if "count" in meta and len(ids) != int(meta["count"]):  # type: ignore[call-overload]
        raise ValueError(f"{len(ids)} ids in {ID_MAP_FILE}, count {meta['count']}")
    return ids
