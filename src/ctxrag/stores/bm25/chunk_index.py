"""`BM25ChunkIndex`: the knowledge base's lexical index, a `ChunkIndex` keyed by chunk id over `IndexedChunk.text`.

>>> from ctxrag.stores.base import IndexedChunk
>>> index = BM25ChunkIndex(tokenizer="mixed")
>>> index.add([IndexedChunk("d1:0", "d1", "检索增强生成 RAG", "检索增强生成 RAG")])
>>> index.search("检索", k=5)[0][0]
'd1:0'
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.bm25.tokenize import Tokenizer
from ctxrag.stores.base import IndexedChunk


class BM25ChunkIndex:
    """BM25 over a knowledge base's chunks; `add` replaces chunks whose id is already indexed."""

    name = "bm25"

    def __init__(
        self, tokenizer: str | dict[str, Any] | Tokenizer = "mixed", variant: str = "okapi", **options: Any
    ) -> None:
        self.index = BM25Index(tokenizer, variant, **options)

    @classmethod
    def from_index(cls, index: BM25Index) -> BM25ChunkIndex:
        self = cls.__new__(cls)
        self.index = index
        return self

    def fork(self) -> BM25ChunkIndex:
        """A copy sharing the postings, with its own deletions and statistics (see `BM25Index.fork`)."""
        return BM25ChunkIndex.from_index(self.index.fork())

    def add(self, chunks: list[IndexedChunk]) -> None:
        if chunks:
            self.index.add([c.text for c in chunks], ids=[c.chunk_id for c in chunks])

    def delete(self, chunk_ids: list[str]) -> None:
        self.index.delete(chunk_ids)

    def search(
        self, query: str, k: int, allowed_chunk_ids: Iterable[str] | None = None, *, fill: bool = False
    ) -> list[tuple[str, float]]:
        """Best `k` chunks for `query` as ``(chunk_id, bm25 score)``; ``[]`` when no query term is indexed, unless
        `fill` (zero-score chunks in index order up to `k`, see `BM25Index.search`)."""
        return self.index.search(query, k=k, allowed_ids=allowed_chunk_ids, fill=fill)

    def save(self, directory: Path) -> None:
        self.index.save(directory)

    @classmethod
    def load(cls, directory: Path, tokenizer: Tokenizer | None = None) -> BM25ChunkIndex:
        """Load from `directory`; raises `IndexCorruptError` for a damaged index."""
        return cls.from_index(BM25Index.load(directory, tokenizer=tokenizer))

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self.index

    def chunk_ids(self) -> list[str]:
        """Ids of the live chunks in insertion order (the order zero-score fill follows)."""
        return self.index.ids
