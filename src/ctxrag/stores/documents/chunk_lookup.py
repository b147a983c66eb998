"""`DocStoreChunkLookup`: a knowledge base's chunks as LangChain `Document`s by id, and the chunk ids a metadata
filter allows, read from its SQLite docstore (the `ChunkLookup` every retriever takes).

Dict filters are cached per committed generation (a hybrid query asks once per sub-retriever); a predicate is
evaluated every time; inside an open write transaction nothing is cached (the rows are not committed yet).

Example::

    from ctxrag.stores.documents.chunk_lookup import DocStoreChunkLookup
    lookup = DocStoreChunkLookup(kb.store, generation=lambda: kb.generation)
    lookup.allowed_chunk_ids({"file_type": ["markdown", "text"]})     # {'3f2a...:0', ...}
    lookup.get_chunks(["3f2a...:0"], {"3f2a...:0": {"score": 0.9}})   # [Document(..., metadata={..., 'score': 0.9})]
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from ctxrag.stores.documents.docstore import DocStore
from ctxrag.stores.filters import MetadataFilter, check_filter, filter_key, matcher
from ctxrag.stores.protocols import ChunkScores

_CACHE_SIZE = 64


class DocStoreChunkLookup:
    """`ChunkLookup` over a `DocStore` (see the module docstring); `generation` gives the committed generation."""

    def __init__(self, store: DocStore, generation: Callable[[], int]) -> None:
        self.store = store
        self.generation = generation
        self._filter_cache: dict[tuple[int, str], set[str]] = {}

    def get_chunks(self, chunk_ids: Sequence[str], scores: ChunkScores | None = None) -> list[Document]:
        """Documents for these chunk ids, in the given order (unknown ids are skipped)."""
        return chunks_as_documents(self.store.get_chunks(list(chunk_ids)), chunk_ids, scores)

    def all_chunks(self) -> list[Document]:
        """Every chunk, ordered by document and position."""
        return [Document(page_content=r.content, metadata=dict(r.metadata), id=r.chunk_id)
                for r in self.store.iter_chunks()]

    def allowed_chunk_ids(self, filter: MetadataFilter | None) -> set[str] | None:
        """Chunk ids whose metadata match `filter` (`ctxrag.stores.filters`); None when there is no filter."""
        if filter is None:
            return None
        check_filter(filter)
        if callable(filter):
            return self._match_chunks(filter)
        key = (self.generation(), filter_key(filter))
        in_transaction = self.store.conn.in_transaction
        cached = self._filter_cache.get(key)
        if cached is None or in_transaction:
            cached = self._match_chunks(matcher(filter))
            if not in_transaction:
                fresh = {k: v for k, v in self._filter_cache.items() if k[0] == key[0]}
                self._filter_cache = fresh if len(fresh) < _CACHE_SIZE else {}
                self._filter_cache[key] = cached
        return cached

    def _match_chunks(self, pred: Callable[[dict[str, Any]], bool]) -> set[str]:
        return {r.chunk_id for r in self.store.iter_chunks() if pred(r.metadata)}


def chunks_as_documents(found: Mapping[str, Any], chunk_ids: Sequence[str],
                        scores: ChunkScores | None = None) -> list[Document]:
    """The chunk records in `found` (by id) as Documents in the order of `chunk_ids`, unknown ids skipped, each
    chunk's `scores` merged into its metadata; shared by every `ChunkLookup`."""
    out = []
    for cid in chunk_ids:
        r = found.get(cid)
        if r is None:
            continue
        md = dict(r.metadata)
        if scores and cid in scores:
            md.update(scores[cid])
        out.append(Document(page_content=r.content, metadata=md, id=cid))
    return out
