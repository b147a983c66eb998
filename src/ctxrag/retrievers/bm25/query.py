"""Stage 4 of BM25: the exact top-k of one query over its terms' columns, without scoring every document.

Each query term is a `TermColumn`: its postings per segment (rows and cached ``tf_part`` weights), the query-side
factor ``idf * count`` and an upper bound on what it adds to any document's score. `top_k_slots` then picks the
cheapest exact plan:

1. few postings in all: merge them directly (sort + lookups), never touching a corpus-sized array;
2. otherwise MaxScore: score a small seed of real documents exactly to get ``theta``, a lower bound on the k-th best
   score. A document that contains only terms whose bounds add up to less than ``theta`` cannot make the top k, so
   only the postings of the other ("essential") terms are candidates; when those are few they are merged as in 1;
3. else accumulate the essential columns into a reused corpus-sized buffer and keep the slots that can still reach
   ``theta`` (one comparison pass), then score those exactly, so the final selection sorts a handful of candidates,
   not the corpus.

Scores are summed in query-term order on every path, so they are bit-for-bit those of the plain accumulation and
ties still break by slot (insertion) order.

>>> col = TermColumn(parts=[(0, np.array([0, 2], dtype=np.int32), np.array([1.0, 2.0]))], scale=0.5)
>>> slots, scores = top_k_slots([col], 1, np.ones(3, dtype=bool), Accumulator())
>>> slots.tolist(), scores.tolist()
([2], [1.0])
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

_SEED = 2048  # documents scored exactly to find theta; small next to the postings of a head term
SPARSE_MIN = 4096  # up to this many postings (or n_docs / SPARSE_FRACTION) are merged directly
SPARSE_FRACTION = 16
_SLACK = 1e-9  # relative margin on pruning bounds so float rounding never drops a document that ties theta
_EMPTY_SLOTS = np.zeros(0, dtype=np.int64)


@dataclass
class TermColumn:
    """One query term's postings: ``(slot offset, rows in the segment, weights)`` per segment, and ``scale``
    (idf times how often the term occurs in the query), so the term adds ``scale * weight`` to a row's score."""

    parts: list[tuple[int, np.ndarray, np.ndarray]]
    scale: float
    max_weight: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.max_weight < 0:
            self.max_weight = max((float(w.max()) for _, _, w in self.parts if len(w)), default=0.0)

    @property
    def length(self) -> int:
        return sum(len(rows) for _, rows, _ in self.parts)

    @property
    def bound(self) -> float:
        """No document gets more than this from the term (valid when ``scale >= 0``)."""
        return self.scale * self.max_weight

    def slots(self, limit: int | None = None) -> np.ndarray:
        """Slots containing the term (ascending), at most the first `limit`."""
        pieces, left = [], limit
        for offset, rows, _ in self.parts:
            taken = rows if left is None else rows[:left]
            pieces.append(taken.astype(np.int64) + offset)
            if left is not None:
                left -= len(taken)
                if left <= 0:
                    break
        return np.concatenate(pieces) if pieces else _EMPTY_SLOTS


class Accumulator:
    """A corpus-sized score buffer reused across queries (zeroed after each use); a concurrent query that finds it
    busy gets a fresh one instead of waiting."""

    def __init__(self) -> None:
        self._buffer: np.ndarray | None = None
        self._lock = threading.Lock()

    @contextmanager
    def borrow(self, n: int) -> Iterator[np.ndarray]:
        if not self._lock.acquire(blocking=False):
            yield np.zeros(n)
            return
        try:
            if self._buffer is None or len(self._buffer) != n:
                self._buffer = np.zeros(n)
            yield self._buffer
        finally:
            if self._buffer is not None:
                self._buffer.fill(0.0)
            self._lock.release()


def top_k_slots(
    columns: list[TermColumn], k: int, eligible: np.ndarray, accumulator: Accumulator
) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` eligible slots containing at least one term, best first (ties: lower slot first), and their
    scores. `eligible` is a bool mask over slots (live documents, optionally a filter)."""
    n = len(eligible)
    sparse_limit = max(SPARSE_MIN, n // SPARSE_FRACTION)
    if sum(c.length for c in columns) <= sparse_limit:
        return _merge(columns, columns, k, eligible)
    if all(c.scale > 0 for c in columns):
        theta = _seed_threshold(columns, k, eligible)
        if theta is not None:
            essential = _essential(columns, theta)
            if sum(c.length for c in essential) <= sparse_limit:
                return _merge(essential, columns, k, eligible)
            kept = {id(c) for c in essential}
            rest_bound = sum(c.bound for c in columns if id(c) not in kept)
            with accumulator.borrow(n) as partial:
                _accumulate(essential, partial)
                # a document can still reach theta only if its essential part plus the others' bounds can;
                # the slack absorbs rounding (extra candidates are scored exactly below, never wrongly kept)
                candidates = np.flatnonzero(partial >= (theta - rest_bound) * (1 - _SLACK))
                candidates = candidates[eligible[candidates]]
                if rest_bound == 0.0:
                    return _select(candidates, partial[candidates], k)
            return _select(candidates, score_slots(candidates, columns), k)
    # weights of either sign (a negative idf without Okapi's floor): track which slots were hit
    with accumulator.borrow(n) as scores:
        hit = np.zeros(n, dtype=bool)
        for column in columns:
            for offset, rows, weights in column.parts:
                scores[offset : offset + _span(rows)][rows] += column.scale * weights
                hit[offset : offset + _span(rows)][rows] = True
        candidates = np.flatnonzero(hit & eligible)
        return _select(candidates, scores[candidates], k)


def score_slots(slots: np.ndarray, columns: list[TermColumn]) -> np.ndarray:
    """Exact scores of the given slots (ascending, unique), looked up in each column's sorted rows."""
    scores = np.zeros(len(slots))
    for column in columns:
        for offset, rows, weights in column.parts:
            if not len(rows):
                continue
            lo, hi = np.searchsorted(slots, [offset + int(rows[0]), offset + int(rows[-1]) + 1])
            if lo == hi:
                continue
            local = (slots[lo:hi] - offset).astype(rows.dtype)  # same dtype: searchsorted would copy `rows` else
            pos = np.searchsorted(rows, local)
            pos[pos == len(rows)] = len(rows) - 1
            found = rows[pos] == local
            scores[lo:hi][found] += column.scale * weights[pos[found]]
    return scores


def _span(rows: np.ndarray) -> int:
    return int(rows[-1]) + 1 if len(rows) else 0


def _accumulate(columns: list[TermColumn], scores: np.ndarray) -> None:
    for column in columns:
        for offset, rows, weights in column.parts:
            # rows are unique within a column, so plain fancy-index += is exact (no np.add.at needed)
            scores[offset : offset + _span(rows)][rows] += column.scale * weights


def _merge(
    candidates_from: list[TermColumn], columns: list[TermColumn], k: int, eligible: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    slots = np.unique(np.concatenate([c.slots() for c in candidates_from]))
    slots = slots[eligible[slots]]
    return _select(slots, score_slots(slots, columns), k)


def _seed_threshold(columns: list[TermColumn], k: int, eligible: np.ndarray) -> float | None:
    """The k-th best exact score among up to `_SEED` documents that contain query terms (short columns whole, the
    budget left split among long ones); None when fewer than k of them are eligible or theta is not positive."""
    pieces, budget = [], _SEED
    by_length = sorted(columns, key=lambda c: c.length)
    for i, column in enumerate(by_length):
        share = max(k, budget // (len(by_length) - i))
        pieces.append(column.slots(share))
        budget -= len(pieces[-1])
    seed = np.unique(np.concatenate(pieces))
    seed = seed[eligible[seed]]
    if len(seed) < k:
        return None
    scores = score_slots(seed, columns)
    theta = float(np.partition(scores, len(scores) - k)[len(scores) - k])
    return theta if theta > 0 else None


def _essential(columns: list[TermColumn], theta: float) -> list[TermColumn]:
    """Drop the weakest terms while their bounds add up to less than theta: no document containing only those can
    reach theta, so every top-k document contains one of the terms kept."""
    ordered = sorted(columns, key=lambda c: c.bound)
    total, cut = 0.0, 0
    for column in ordered:
        if total + column.bound >= theta * (1 - _SLACK):
            break
        total += column.bound
        cut += 1
    kept = {id(c) for c in ordered[cut:]}
    return [c for c in columns if id(c) in kept]  # query order, so sums add up in the same order on every plan


def _select(slots: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = top_k(scores, k)
    return slots[order], scores[order]


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the `k` largest scores, best first; equal scores keep their (ascending position) order."""
    n = len(scores)
    if n > k:
        threshold = np.partition(scores, n - k)[n - k]
        chosen = np.flatnonzero(scores >= threshold)
    else:
        chosen = np.arange(n)
    order = np.argsort(-scores[chosen], kind="stable")[:k]
    return chosen[order]
