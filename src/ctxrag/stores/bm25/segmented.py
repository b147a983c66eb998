"""`SegmentedKeywordIndex`: the knowledge base's BM25 index as immutable segments (see `ctxrag.stores.engine.segments`),
scoring exactly like one index over the same live chunks.

BM25 scores depend on the whole corpus: the number of documents, their average length, and each term's document
frequency (and, for Okapi, the mean idf of every term). Each segment keeps its own vocabulary and statistics with its
tombstones applied (a tombstone is deleted from the loaded segment object, so its frequencies leave the counts); the
first search after a change adds them up over the union vocabulary (one pass over the vocabularies, cached until the
next change) and gives every segment the corpus's idf and average length (`BM25Index.use_statistics`). Each segment
then returns its exact top-k, and the best k over all segments, ties in insertion order (older segment first), are
what one merged index returns.

Example::

    from ctxrag.stores.base import IndexedChunk
    from ctxrag.stores.bm25 import BM25ChunkIndex
    index = SegmentedKeywordIndex("bm25", BM25ChunkIndex, BM25ChunkIndex.load)
    index.add([IndexedChunk("d1:0", "d1", "the cat sat", "the cat sat")])
    index.search("cat", k=5)   # [("d1:0", ...)]
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import numpy as np

from ctxrag.stores.base import ChunkIndex
from ctxrag.stores.bm25.chunk_index import BM25ChunkIndex
from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.bm25.scoring import absent_term_score, term_idf
from ctxrag.stores.engine.segments import Sealed, SegmentedIndex


class SegmentedKeywordIndex(SegmentedIndex):
    """A `KeywordIndex` over segments of `BM25ChunkIndex`, with exact corpus-wide BM25 statistics."""

    tombstones_in_index = True
    reopens = True

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._stats_version = -1
        self._global_vocab: dict[str, int] = {}
        self._global_df = np.zeros(0, dtype=np.int64)
        self._global_idf = np.zeros(0)
        self._lock = threading.Lock()

    def _new_segment(self) -> BM25ChunkIndex:
        return self._like(self.sealed[0].index if self.sealed else None)

    def _like(self, first: ChunkIndex | None) -> BM25ChunkIndex:
        """An empty index tokenizing as `first` (the oldest segment) does: queries go through the first segment's
        tokenizer, so a knowledge base keeps the tokenizer it was first built with (``bm25_stem`` changed later
        does not mix two in one index)."""
        fresh = cast(BM25ChunkIndex, self._make())
        if first is not None:
            fresh.index.tokenizer = cast(BM25ChunkIndex, first).index.tokenizer
        return fresh

    def _indexes(self) -> list[BM25Index]:
        return [cast(BM25ChunkIndex, index).index for index, _ in self.parts()]

    def _statistics(self, parts: list[BM25Index]) -> None:
        """Corpus statistics over every segment, handed to each (once per change)."""
        with self._lock:
            if self._stats_version == self.version:
                return
            vocab: dict[str, int] = {}
            maps = []
            for p in parts:
                tokens = p.vocabulary
                if not vocab:  # the first (usually largest) segment's term ids are the corpus's
                    vocab = dict(tokens)
                    maps.append(np.arange(len(tokens), dtype=np.int64))
                else:
                    maps.append(np.fromiter((vocab.setdefault(t, len(vocab)) for t in tokens), dtype=np.int64,
                                            count=len(tokens)))
            df = np.zeros(len(vocab), dtype=np.int64)
            for p, m in zip(parts, maps):
                df[m] += p.document_frequencies  # term ids within one segment are distinct
            n_docs = sum(len(p) for p in parts)
            total = sum(p.total_length for p in parts)
            idf = np.zeros(len(df))
            present = df > 0
            if parts:
                idf[present] = term_idf(df[present], n_docs, parts[0].params)
            avgdl = total / n_docs if n_docs else 0.0
            for p, m in zip(parts, maps):
                p.use_statistics(idf[m], avgdl)
            self._global_vocab, self._global_df, self._global_idf = vocab, df, idf
            self._stats_version = self.version

    def search(
        self, query: str, k: int, allowed_chunk_ids: Iterable[str] | None = None, *, fill: bool = False
    ) -> list[tuple[str, float]]:
        """Best `k` chunks for `query` as ``(chunk_id, bm25 score)`` over every segment (see `BM25Index.search`)."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        parts = self._indexes()
        if not parts:
            return []
        self._statistics(parts)
        tokens = parts[0].tokenize_query(query)
        allowed = None if allowed_chunk_ids is None else set(allowed_chunk_ids)
        floor = 0.0
        for token, count in Counter(tokens).items():  # the order BM25Index sums it in
            term = self._global_vocab.get(token)
            if term is not None and self._global_df[term] > 0:
                floor += absent_term_score(float(self._global_idf[term]) * count, parts[0].params)
        hits: list[tuple[float, int, int, str]] = []
        for pos, p in enumerate(parts):
            found = p.search(tokens, k, allowed_ids=allowed, constant=False)
            hits.extend((-score, pos, rank, cid) for rank, (cid, score) in enumerate(found))
        hits.sort()
        out = [(cid, -neg + floor) for neg, _, _, cid in hits[:k]]
        if fill and len(out) < k:
            seen = {cid for cid, _ in out}
            for p in parts:
                for cid in p.iter_ids():
                    if len(out) >= k:
                        break
                    if cid not in seen and (allowed is None or cid in allowed):
                        out.append((cid, floor))
        return out

    def _write(self, index: ChunkIndex, segments_dir: Path, generation: int) -> Sealed:
        # sealed: searched by every query from now on, never appended to, so its postings blocks become one
        cast(BM25ChunkIndex, index).index.consolidate()
        return super()._write(index, segments_dir, generation)

    def merged(self, parts: list[tuple[ChunkIndex, set[str]]]) -> ChunkIndex:
        import scipy.sparse as sp  # merging only: searching never loads scipy

        indexes = [cast(BM25ChunkIndex, index).index for index, _ in parts]
        vocab: dict[str, int] = {}
        rows, cols, tfs, lengths, ids = [], [], [], [], []
        offset = 0
        for p in indexes:
            matrix, doc_len, pids = p.live_postings()
            mapping = np.fromiter((vocab.setdefault(t, len(vocab)) for t in p.vocabulary), dtype=np.int64,
                                  count=len(p.vocabulary))
            coo = matrix.tocoo()
            rows.append(coo.row.astype(np.int64) + offset)
            cols.append(mapping[coo.col])
            tfs.append(coo.data)
            lengths.append(doc_len)
            ids.extend(pids)
            offset += len(pids)
        col = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
        used = np.zeros(len(vocab), dtype=bool)
        used[col] = True  # terms only deleted documents had are dropped
        renumber = np.cumsum(used) - 1
        tokens = [t for t, i in vocab.items() if used[i]]
        matrix = sp.csr_matrix((np.concatenate(tfs) if tfs else np.zeros(0), (np.concatenate(rows) if rows else col,
                                renumber[col])), shape=(offset, len(tokens)))
        base = self._like(parts[0][0] if parts else None)
        merged = base.index.with_postings(
            matrix, np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64), ids, tokens)
        return BM25ChunkIndex.from_index(merged)
