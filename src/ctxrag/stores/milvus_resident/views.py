"""The typed faces (`ctxrag.stores.protocols`) of a `MilvusResidentStore`, so `ctxrag.retrievers.factory` builds the
same dense, BM25 and hybrid retrievers over a Milvus-resident knowledge base as over a local one.

- `MilvusChunkLookup` (`ChunkLookup`): chunks by id from Milvus; ``allowed_chunk_ids(filter)`` returns a
  `FilteredIds` carrying the Milvus expression of the filter.
- `MilvusDenseIndex` (`DenseIndex`) and `MilvusKeywordIndex` (`KeywordIndex`): searches with that expression, so a
  filter is applied inside Milvus before the top-k cut, as the local indexes apply theirs.

Writes go through the knowledge base (`ctxrag.kb.milvus`), which replaces whole documents; the indexes'
``add``/``delete`` are the `ChunkIndex` contract for callers that hold chunks with vectors (``kb repair``).

Example::

    lookup = MilvusChunkLookup(store)
    allowed = lookup.allowed_chunk_ids({"source": "a.md"})      # FilteredIds('source == "a.md"')
    MilvusKeywordIndex(store).search("Falcon pump", 5, allowed_chunk_ids=allowed)
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document

from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.documents.chunk_lookup import chunks_as_documents
from ctxrag.stores.filters import MetadataFilter, check_filter, matcher, milvus_expression
from ctxrag.stores.milvus_resident.expressions import FilteredIds, allowed_expression, ids_expression
from ctxrag.stores.milvus_resident.store import MilvusResidentStore
from ctxrag.stores.protocols import ChunkScores


class MilvusChunkLookup:
    """`ChunkLookup` over a Milvus-resident knowledge base."""

    def __init__(self, store: MilvusResidentStore) -> None:
        self.store = store

    def get_chunks(self, chunk_ids: Sequence[str], scores: ChunkScores | None = None) -> list[Document]:
        return chunks_as_documents(self.store.get_chunks(list(chunk_ids)), chunk_ids, scores)

    def all_chunks(self) -> list[Document]:
        records = sorted(self.store.iter_chunks(), key=lambda r: (r.doc_id, r.chunk_index))
        return [Document(page_content=r.content, metadata=dict(r.metadata), id=r.chunk_id) for r in records]

    def allowed_chunk_ids(self, filter: MetadataFilter | None) -> FilteredIds | None:
        """The chunks `filter` allows, as a Milvus expression (a predicate is evaluated here over every chunk's
        metadata, and its matches sent as ids)."""
        if filter is None:
            return None
        check_filter(filter)
        if callable(filter):
            return self._by_predicate(filter)
        expr = milvus_expression(filter)
        if expr is None:  # a value no expression states (None, a nested dict): compare as the local store does
            return self._by_predicate(matcher(filter))
        return FilteredIds(expr, self.store.chunk_ids)

    def _by_predicate(self, pred: Callable[[dict[str, Any]], bool]) -> FilteredIds:
        ids = {r.chunk_id for r in self.store.iter_chunks() if pred(dict(r.metadata))}
        allowed = FilteredIds(ids_expression(ids), self.store.chunk_ids)
        allowed._ids = ids
        return allowed


class MilvusDenseIndex:
    """`DenseIndex` over the chunks collection's dense vectors (COSINE)."""

    name = "dense"

    def __init__(self, store: MilvusResidentStore) -> None:
        self.store = store

    @property
    def dim(self) -> int | None:
        return self.store.dim

    def search(self, vector: np.ndarray, k: int, allowed_chunk_ids: AbstractSet[str] | None = None) -> list[tuple[str, float]]:
        return self.store.dense_search(vector, k, allowed_expression(allowed_chunk_ids))

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        return self.store.vectors(chunk_ids)

    def add(self, chunks: list[IndexedChunk]) -> None:
        raise NotImplementedError("a Milvus-resident knowledge base is written by whole documents (kb.ingest, "
                                  "kb.add_texts, kb.upsert_chunked), not index by index")

    def delete(self, chunk_ids: list[str]) -> None:
        raise NotImplementedError("delete documents through the knowledge base (kb.delete_document)")

    def save(self, directory: Path) -> None:
        """Milvus persists itself: nothing to write."""

    @property
    def chunk_ids(self) -> set[str]:
        return self.store.chunk_ids()

    def __len__(self) -> int:
        return self.store.chunk_count()

    def __contains__(self, chunk_id: object) -> bool:
        return isinstance(chunk_id, str) and bool(self.store.get_chunks([chunk_id]))

    def __repr__(self) -> str:
        return f"MilvusDenseIndex({self.store!r})"


class MilvusKeywordIndex(MilvusDenseIndex):
    """`KeywordIndex` over Milvus's full-text BM25 of the chunks collection."""

    name = "bm25"

    def search(  # type: ignore[override]
        self, query: str, k: int, allowed_chunk_ids: Iterable[str] | None = None, *, fill: bool = False
    ) -> list[tuple[str, float]]:
        allowed = allowed_chunk_ids if allowed_chunk_ids is None or isinstance(allowed_chunk_ids, FilteredIds) \
            else set(allowed_chunk_ids)
        return self.store.bm25_search(query, k, allowed_expression(allowed), fill=fill)

    def __repr__(self) -> str:
        return f"MilvusKeywordIndex({self.store!r})"
