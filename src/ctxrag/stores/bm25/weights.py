"""Per-posting BM25 weights (``idf * tf_part``) for one postings block, filled a column at a time on first use.

A query then reads a term's weights as a slice, like bm25s's precomputed CSC matrix, instead of recomputing
``idf * tf / (tf + k1 * norm)`` for every posting of every query. The weights depend on idf and the average document
length, both of which move with every add or delete, so the index drops every `BlockWeights` then (see
``BM25Index._changed``); columns are refilled as queries touch them, so an update never pays for columns no query
reads. The values array is allocated with ``np.empty``: pages of columns never filled are never touched, so they cost
no resident memory.

>>> from ctxrag.stores.bm25.scoring import BM25Params
>>> from ctxrag.stores.bm25.blocks import PostingsBlock
>>> block = PostingsBlock.from_token_ids(np.array([0, 1, 0, 0], dtype=np.int32), np.array([3, 1]), n_terms=2)
>>> w = BlockWeights(block, np.ones(2), np.array([2.0, 1.0]), BM25Params())
>>> rows, values, best = w.column(0)
>>> rows.tolist(), [round(float(v), 4) for v in values], round(best, 4)
([0, 1], [2.8571, 2.0], 2.8571)
"""
from __future__ import annotations

import numpy as np

from ctxrag.stores.bm25.scoring import BM25Params, tf_part
from ctxrag.stores.bm25.blocks import PostingsBlock


class BlockWeights:
    """``idf[term] * tf_part`` of every posting of `block` under the length factors `norm` (one per row)."""

    def __init__(self, block: PostingsBlock, norm: np.ndarray, idf: np.ndarray, params: BM25Params) -> None:
        self.block = block
        self.norm = norm
        self.idf = idf
        self.params = params
        self.values = np.empty(block.nnz, dtype=np.float64)
        self.col_max = np.zeros(block.n_terms, dtype=np.float64)
        self.ready = np.zeros(block.n_terms, dtype=bool)
        self._best: dict[int, np.ndarray] = {}

    def column(self, term: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Rows containing `term` (ascending), their weights, and the largest weight (0.0 for an empty column)."""
        # idf * (tf part), multiplied in that order as `posting_weights` does, so scores equal the uncached ones
        block = self.block
        if term >= block.n_terms:
            return block.indices[:0], self.values[:0], 0.0
        start, end = int(block.indptr[term]), int(block.indptr[term + 1])
        rows = block.indices[start:end]
        if not self.ready[term]:
            if end > start:
                weights = self.idf[term] * tf_part(block.tf[start:end], self.norm[rows], self.params)
                self.values[start:end] = weights
                self.col_max[term] = weights.max()
            self.ready[term] = True  # set last: a concurrent reader sees it only once the values are written
        return rows, self.values[start:end], float(self.col_max[term])

    def best_rows(self, term: int, m: int) -> np.ndarray:
        """Rows of the (up to) `m` largest weights of `term`'s column; they seed the query's score threshold."""
        best = self._best.get(term)
        if best is None or len(best) < m:
            rows, values, _ = self.column(term)
            if len(values) > m:
                best = rows[np.argpartition(values, len(values) - m)[len(values) - m :]]
            else:
                best = rows
            self._best[term] = best = np.sort(best)
        return best
