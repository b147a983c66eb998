"""Views of a knowledge base's indexes that always read the newest committed generation.

A long-lived retriever must not keep the index object it was built with: another writer (in this process or another)
may commit a newer generation, and `IndexSnapshots.current` switches to it on the next access. These views resolve
the index on every call, so a retriever holds a `CurrentDenseIndex` / `CurrentKeywordIndex` and stays current.
Writes belong in the knowledge base's write sessions; `add` / `delete` / `save` here act on the current snapshot,
exactly as on ``kb.indexes["dense"]``.

Example::

    from ctxrag.stores.engine.current import CurrentDenseIndex
    dense = CurrentDenseIndex(lambda: kb.indexes, owner=kb.name)
    dense.search(query_vector, 5)          # always the newest generation's FAISS (or Chroma/Milvus) index

A search that finds its generation's files damaged is tried once more on a newer generation when one is committed
(`newer_than`, given by the knowledge base): the damage a ``kb repair`` just fixed costs no request.
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from ctxrag.errors import IndexCorruptError
from ctxrag.stores.base import ChunkIndex, IndexedChunk
from ctxrag.stores.protocols import DenseIndex, KeywordIndex


Indexes = Mapping[str, ChunkIndex]
NewerThan = Callable[[Indexes], "Indexes | None"]
"""Given the indexes a search found damaged, the newer generation's indexes to retry on, or None
(`IndexSnapshots.newer_than`)."""

T = TypeVar("T")


class _CurrentIndex:
    name: str
    label: str = ""
    """What an error message calls this kind of index."""

    def __init__(self, indexes: Callable[[], Indexes], *, owner: str, name: str,
                 newer_than: NewerThan | None = None) -> None:
        self._indexes = indexes
        self.owner = owner
        """Name of the knowledge base, for error messages."""
        self.name = name
        self._newer_than = newer_than

    def current(self) -> Any:
        """The index of the newest committed generation; `RuntimeError` naming the knowledge base when it has none."""
        return self._pick(self._indexes())

    def _pick(self, indexes: Indexes) -> Any:
        index = indexes.get(self.name)
        if index is None:
            raise RuntimeError(f"knowledge base {self.owner!r} has no {self.label or self.name} index")
        return index

    def _read(self, read: Callable[[Any], T]) -> T:
        """`read` on the current index; when it raises `IndexCorruptError` and a newer generation is committed (a
        repair), once more on that one, waiting for a load another thread has in progress."""
        indexes = self._indexes()
        try:
            return read(self._pick(indexes))
        except IndexCorruptError:
            newer = self._newer_than(indexes) if self._newer_than is not None else None
            if newer is None:
                raise
            return read(self._pick(newer))

    def add(self, chunks: list[IndexedChunk]) -> None:
        self.current().add(chunks)

    def delete(self, chunk_ids: list[str]) -> None:
        self.current().delete(chunk_ids)

    def save(self, directory: Path) -> None:
        self.current().save(directory)

    def __len__(self) -> int:
        return len(self.current())

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self.current()

    def chunk_ids(self) -> list[str]:
        return self.current().chunk_ids()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(owner={self.owner!r}, name={self.name!r})"


class CurrentDenseIndex(_CurrentIndex):
    """The `DenseIndex` of the newest committed generation (FAISS, Chroma or Milvus)."""

    def __init__(self, indexes: Callable[[], Indexes], *, owner: str, name: str = "dense",
                 newer_than: NewerThan | None = None) -> None:
        super().__init__(indexes, owner=owner, name=name, newer_than=newer_than)

    def current(self) -> DenseIndex:
        return cast(DenseIndex, super().current())

    def search(
        self, vector: np.ndarray, k: int, allowed_chunk_ids: AbstractSet[str] | None = None
    ) -> list[tuple[str, float]]:
        return self._read(lambda index: index.search(vector, k, allowed_chunk_ids=allowed_chunk_ids))

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        return self._read(lambda index: index.vectors(chunk_ids))

    @property
    def dim(self) -> int | None:
        """The vector dimension of the current generation's index (None while it holds no vector)."""
        return cast("int | None", getattr(self.current(), "dim", None))


class CurrentKeywordIndex(_CurrentIndex):
    """The `KeywordIndex` (BM25) of the newest committed generation."""

    label = "BM25"

    def __init__(self, indexes: Callable[[], Indexes], *, owner: str, name: str = "bm25",
                 newer_than: NewerThan | None = None) -> None:
        super().__init__(indexes, owner=owner, name=name, newer_than=newer_than)

    def current(self) -> KeywordIndex:
        return cast(KeywordIndex, super().current())

    def search(
        self, query: str, k: int, allowed_chunk_ids: Iterable[str] | None = None, *, fill: bool = False
    ) -> list[tuple[str, float]]:
        return self._read(lambda index: index.search(query, k, allowed_chunk_ids=allowed_chunk_ids, fill=fill))
