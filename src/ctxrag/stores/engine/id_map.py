"""`IdMap`: chunk id <-> FAISS int id of one dense index, as numpy arrays, so opening a saved index builds no Python
object per chunk.

A saved map is three arrays in ``id_map.npz`` (read in C at a few milliseconds per million ids): the int ids in
insertion order (ascending: int ids only grow), the chunk ids as UTF-8 bytes in the same order, and the positions that
sort the chunk ids. Lookups are binary searches (`np.searchsorted`) over those arrays. What a writer adds after
loading lives in a small dict next to them and what it removes in a set, so a fresh in-memory index (every id added)
behaves like the dicts it replaces, and a loaded one only pays for what changed.

Example::

    import numpy as np
    from ctxrag.stores.engine.id_map import IdMap
    ids = IdMap.from_arrays(np.array([0, 1, 2]), ["a:0", "b:0", "c:0"])
    ids.get("b:0")            # 1
    ids.chunk(2)              # "c:0"
    ids.pop("a:0"); len(ids)  # 2
"""
from __future__ import annotations

import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

ID_MAP_FILE = "id_map.npz"
_ENC = ("utf-8", "surrogatepass")


def _encode(chunk_ids: list[str]) -> np.ndarray:
    if not chunk_ids:
        return np.zeros(0, dtype="S1")
    return np.array([c.encode(*_ENC) for c in chunk_ids], dtype=np.bytes_)


class IdMap:
    """Chunk id <-> int id: sorted arrays read from a saved index, plus what was added and removed since."""

    def __init__(self) -> None:
        self._ints = np.zeros(0, dtype=np.int64)
        """Int ids of the base arrays, ascending."""
        self._chunks = np.zeros(0, dtype="S1")
        """Chunk ids (UTF-8) of the base arrays, aligned with `_ints`."""
        self._sorted = np.zeros(0, dtype="S1")
        """`_chunks` sorted, and `_where` the position of each in `_chunks`."""
        self._where = np.zeros(0, dtype=np.int64)
        self._removed: set[int] = set()
        self._removed_sorted: np.ndarray | None = None
        """`_removed` as a sorted array, built on the first vectorized lookup after a change (not per lookup)."""
        self._added: dict[str, int] = {}
        self._added_rev: dict[int, str] = {}

    @classmethod
    def from_arrays(cls, int_ids: np.ndarray | Sequence[int], chunk_ids: Sequence[str] | np.ndarray,
                    order: np.ndarray | None = None) -> IdMap:
        """A map of these pairs (`int_ids` ascending); `order` sorts `chunk_ids` (computed when not given).
        `ValueError` names what does not fit."""
        ints = np.asarray(int_ids, dtype=np.int64)
        chunks = chunk_ids if isinstance(chunk_ids, np.ndarray) else _encode(list(chunk_ids))
        if len(ints) != len(chunks):
            raise ValueError(f"{len(ints)} int ids but {len(chunks)} chunk ids")
        if len(ints) > 1 and not bool(np.all(ints[1:] > ints[:-1])):
            raise ValueError("int ids are not ascending")
        order = np.argsort(chunks, kind="stable") if order is None else np.asarray(order, dtype=np.int64)
        if len(order) != len(chunks):
            raise ValueError(f"{len(order)} sort positions for {len(chunks)} chunk ids")
        self = cls()
        self._ints, self._chunks, self._where = ints, chunks, order
        self._sorted = chunks[order]
        if len(self._sorted) > 1 and not bool(np.all(self._sorted[1:] > self._sorted[:-1])):
            raise ValueError("chunk ids are not unique, or their sort order is wrong")
        return self

    @classmethod
    def load(cls, path: Path) -> IdMap:
        """Read ``id_map.npz`` (`ValueError`/`OSError` when it is damaged; the caller names the file)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls.from_arrays(z["int_ids"], z["chunk_ids"], z["order"])
        except (zipfile.BadZipFile, KeyError, EOFError) as e:
            raise ValueError(f"{path.name}: {e}") from None

    def save(self, path: Path) -> None:
        ints, chunks = self.arrays()
        with open(path, "wb") as f:
            np.savez(f, int_ids=ints, chunk_ids=chunks, order=np.argsort(chunks, kind="stable"))

    def copy(self) -> IdMap:
        """An independent map sharing the (never changed) base arrays: costs what was added and removed since."""
        out = IdMap()
        out._ints, out._chunks, out._sorted, out._where = self._ints, self._chunks, self._sorted, self._where
        out._removed, out._added, out._added_rev = set(self._removed), dict(self._added), dict(self._added_rev)
        out._removed_sorted = self._removed_sorted  # never changed in place: replaced on the next `pop`
        return out

    def frozen(self) -> IdMap:
        """The same map with everything in the base arrays (after a save: later copies cost nothing)."""
        return IdMap.from_arrays(*self.arrays())

    # -- lookups ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ints) - len(self._removed) + len(self._added)

    def __contains__(self, chunk_id: object) -> bool:
        return isinstance(chunk_id, str) and self.get(chunk_id) is not None

    def _base_pos(self, chunk_id: str) -> int | None:
        if not len(self._sorted):
            return None
        key = np.bytes_(chunk_id.encode(*_ENC))
        i = int(np.searchsorted(self._sorted, key))
        if i < len(self._sorted) and self._sorted[i] == key:
            pos = int(self._where[i])
            return None if int(self._ints[pos]) in self._removed else pos
        return None

    def get(self, chunk_id: str) -> int | None:
        """The int id of `chunk_id`, or None."""
        found = self._added.get(chunk_id)
        if found is not None:
            return found
        pos = self._base_pos(chunk_id)
        return None if pos is None else int(self._ints[pos])

    def ints(self, chunk_ids: Iterable[str]) -> np.ndarray:
        """Int ids of those of `chunk_ids` this map holds (vectorized: for filters of many ids)."""
        ids = list(chunk_ids)
        out = [self._added[c] for c in ids if c in self._added]
        if len(self._sorted) and ids:
            keys = _encode(ids)
            i = np.minimum(np.searchsorted(self._sorted, keys), len(self._sorted) - 1)
            hit = self._sorted[i] == keys
            found = self._ints[self._where[i[hit]]]
            if self._removed:
                found = found[~self._is_removed(found)]
            out.extend(found.tolist())
        return np.asarray(out, dtype=np.int64)

    def chunk(self, int_id: int) -> str | None:
        """The chunk id of `int_id`, or None (removed, or never mapped)."""
        found = self._added_rev.get(int_id)
        if found is not None or int_id in self._removed or not len(self._ints):
            return found
        i = int(np.searchsorted(self._ints, int_id))
        if i < len(self._ints) and int(self._ints[i]) == int_id:
            return bytes(self._chunks[i]).decode(*_ENC)
        return None

    def chunks(self, int_ids: np.ndarray | Sequence[int]) -> list[str]:
        """Chunk ids of `int_ids`, in their order (vectorized: for a page of results or every id). `KeyError` names
        an int id this map does not hold."""
        ints = np.asarray(int_ids, dtype=np.int64)
        out: list[str | None] = [None] * len(ints)
        hit = np.zeros(len(ints), dtype=bool)
        if len(self._ints) and len(ints):
            i = np.minimum(np.searchsorted(self._ints, ints), len(self._ints) - 1)
            hit = self._ints[i] == ints
            if self._removed:
                hit &= ~self._is_removed(ints)
            if hit.all():  # the usual case: every id from the base arrays
                return [b.decode(*_ENC) for b in self._chunks[i].tolist()]
            for p, b in zip(np.flatnonzero(hit).tolist(), self._chunks[i[hit]].tolist()):
                out[p] = b.decode(*_ENC)
        for p in np.flatnonzero(~hit).tolist():
            found = self._added_rev.get(int(ints[p]))
            if found is None:
                raise KeyError(f"int id {int(ints[p])} is not mapped")
            out[p] = found
        return out  # type: ignore[return-value]

    # -- changes ----------------------------------------------------------------------------------------------
    def put(self, chunk_id: str, int_id: int) -> None:
        """Map a new chunk id (not in the map) to a new int id (above every one used)."""
        self._added[chunk_id] = int_id
        self._added_rev[int_id] = chunk_id

    def pop(self, chunk_id: str) -> int | None:
        """Remove `chunk_id`; its int id, or None when it was not mapped."""
        found = self._added.pop(chunk_id, None)
        if found is not None:
            del self._added_rev[found]
            return found
        pos = self._base_pos(chunk_id)
        if pos is None:
            return None
        found = int(self._ints[pos])
        self._removed.add(found)
        self._removed_sorted = None
        return found

    # -- in order ---------------------------------------------------------------------------------------------
    def _is_removed(self, ints: np.ndarray) -> np.ndarray:
        """Which of `ints` were removed: binary searches in the sorted removed ids, which are sorted once per
        change, so a search over a segment with tombstones does not sort them again for its page of results."""
        removed = self._removed_sorted
        if removed is None or len(removed) != len(self._removed):
            removed = np.sort(np.fromiter(self._removed, np.int64, len(self._removed)))
            self._removed_sorted = removed
        if not len(removed):
            return np.zeros(len(ints), dtype=bool)
        i = np.minimum(np.searchsorted(removed, ints), len(removed) - 1)
        return removed[i] == ints

    def _live(self) -> np.ndarray:
        if not self._removed:
            return np.ones(len(self._ints), dtype=bool)
        return ~self._is_removed(self._ints)

    def int_ids(self) -> np.ndarray:
        """Live int ids in insertion order."""
        added = np.fromiter(self._added.values(), np.int64, len(self._added))
        return np.concatenate([self._ints[self._live()], added])

    def chunk_ids(self) -> list[str]:
        """Live chunk ids in insertion order."""
        base = [bytes(b).decode(*_ENC) for b in self._chunks[self._live()].tolist()]
        return base + list(self._added)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(int ids, UTF-8 chunk ids) of the live entries in insertion order."""
        live = self._live()
        added = _encode(list(self._added))
        chunks = self._chunks[live]
        if len(added):
            width = max(chunks.dtype.itemsize, added.dtype.itemsize)
            chunks = np.concatenate([chunks.astype(f"S{width}"), added.astype(f"S{width}")])
        ints = np.concatenate([self._ints[live], np.fromiter(self._added.values(), np.int64, len(self._added))])
        return ints, chunks
