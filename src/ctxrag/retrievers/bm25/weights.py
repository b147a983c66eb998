"""Per-posting BM25 weights (the idf-free ``tf_part``) for one segment, filled a column at a time on first use.

A query then reads a term's weights as a slice, like bm25s's precomputed CSC matrix, instead of recomputing
``tf / (tf + k1 * norm)`` for every posting of every query. The weights depend on the average document length, so
the index drops every `SegmentWeights` when a document is added or deleted (see ``BM25Index._changed``); columns are
then refilled as queries touch them, so an update never pays for columns no query reads. The values array is
allocated with ``np.empty``: the pages of columns never filled are never touched, so they cost no resident memory.

>>> from ctxrag.retrievers.bm25.scoring import BM25Params
>>> from ctxrag.retrievers.bm25.segment import Segment
>>> seg = Segment.from_token_ids(np.array([0, 1, 0, 0], dtype=np.int32), np.array([3, 1]), n_terms=2)
>>> w = SegmentWeights(seg, np.ones(2), BM25Params())
>>> rows, values, best = w.column(0)
>>> rows.tolist(), [round(float(v), 4) for v in values], round(best, 4)
([0, 1], [1.4286, 1.0], 1.4286)
"""
from __future__ import annotations

import numpy as np

from ctxrag.retrievers.bm25.scoring import BM25Params, tf_part
from ctxrag.retrievers.bm25.segment import Segment


class SegmentWeights:
    """``tf_part`` of every posting of `segment` under the length factors `norm` (one per row of the segment)."""

    def __init__(self, segment: Segment, norm: np.ndarray, params: BM25Params) -> None:
        self.segment = segment
        self.norm = norm
        self.params = params
        self.values = np.empty(segment.nnz, dtype=np.float64)
        self.col_max = np.zeros(segment.n_terms, dtype=np.float64)
        self.ready = np.zeros(segment.n_terms, dtype=bool)

    def column(self, term: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Rows containing `term` (ascending), their weights, and the largest weight (0.0 for an empty column)."""
        segment = self.segment
        if term >= segment.n_terms:
            return segment.indices[:0], self.values[:0], 0.0
        start, end = int(segment.indptr[term]), int(segment.indptr[term + 1])
        rows = segment.indices[start:end]
        if not self.ready[term]:
            if end > start:
                weights = tf_part(segment.tf[start:end], self.norm[rows], self.params)
                self.values[start:end] = weights
                self.col_max[term] = weights.max()
            self.ready[term] = True  # set last: a concurrent reader sees it only once the values are written
        return rows, self.values[start:end], float(self.col_max[term])
