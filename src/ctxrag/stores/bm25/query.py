"""Stage 4 of BM25: the exact top-k of one query over its terms' columns, without scoring every document.

Each query term is a `TermColumn`: its postings per postings block (rows and cached ``tf_part`` weights), the query-side
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
from dataclasses import dataclass

import numpy as np

_SEED = 512  # documents scored exactly to find theta; small next to the postings of a head term
SEEDS_PER_TERM = 32  # of them, the best-weighted postings of each query term
SPARSE_MIN = 4096  # up to this many postings (or n_docs / SPARSE_FRACTION) are merged directly
SPARSE_FRACTION = 16
_LOOKUP_COST = 16  # a binary-search lookup costs about this many sequential posting additions
_SLACK = 1e-9  # relative margin on pruning bounds so float rounding never drops a document that ties theta
_EMPTY_SLOTS = np.zeros(0, dtype=np.int64)


@dataclass
class TermColumn:
    """One query term's postings: ``(slot offset, rows in the block, weights)`` per postings block, and ``scale`` (how
    often the term occurs in the query), so the term adds ``scale * weight`` to a row's score. `positive`: every
    weight is > 0 (idf > 0), which the pruning bounds need."""

    parts: list[tuple[int, np.ndarray, np.ndarray]]
    scale: float = 1.0
    max_weight: float | None = None
    positive: bool = True
    seeds: np.ndarray | None = None
    """Slots of the term's highest weights (any real postings do; these give a tight threshold)."""

    def __post_init__(self) -> None:
        if self.max_weight is None:
            self.max_weight = max((float(w.max()) for _, _, w in self.parts if len(w)), default=0.0)

    @property
    def length(self) -> int:
        return sum(len(rows) for _, rows, _ in self.parts)

    @property
    def bound(self) -> float:
        """No document gets more than this from the term (valid when `positive`)."""
        return self.scale * float(self.max_weight or 0.0)

    def contribution(self, weights: np.ndarray) -> np.ndarray:
        """What the term adds for these postings (no copy when the term occurs once in the query)."""
        return weights if self.scale == 1.0 else self.scale * weights

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
    if all(c.positive and c.scale > 0 for c in columns):
        theta = _seed_threshold(columns, k, eligible)
        if theta is not None:
            essential = _essential(columns, theta)
            if sum(c.length for c in essential) <= sparse_limit:
                return _merge(essential, columns, k, eligible, theta)
            kept = {id(c) for c in essential}
            rest = [c for c in columns if id(c) not in kept]
            rest_bound = sum(c.bound for c in rest)
            with accumulator.borrow(n) as scores:
                _accumulate(essential, scores)
                # a document can still reach theta only if its essential part plus the others' bounds can;
                # the slack absorbs rounding (extra candidates are scored exactly, never wrongly kept)
                candidates = np.flatnonzero(scores >= (theta - rest_bound) * (1 - _SLACK))
                candidates = candidates[eligible[candidates]]
                if not rest:
                    return _select(candidates, scores[candidates], k)
                # looking the rest up costs ~ candidates * columns * log(length); adding them in costs ~ their
                # postings: take the cheaper (adding in redoes the sum in query order, for identical scores)
                if len(candidates) * len(columns) * _LOOKUP_COST > sum(c.length for c in rest):
                    scores.fill(0.0)
                    _accumulate(columns, scores)
                    candidates = np.flatnonzero(scores >= theta * (1 - _SLACK))
                    candidates = candidates[eligible[candidates]]
                    return _select(candidates, scores[candidates], k)
            return _select(candidates, score_slots(candidates, columns), k)
    # weights of either sign (a negative idf without Okapi's floor): track which slots were hit
    with accumulator.borrow(n) as scores:
        hit = np.zeros(n, dtype=bool)
        for column in columns:
            for offset, rows, weights in column.parts:
                scores[offset : offset + _span(rows)][rows] += column.contribution(weights)
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
            scores[lo:hi][found] += column.contribution(weights[pos[found]])
    return scores


def _span(rows: np.ndarray) -> int:
    return int(rows[-1]) + 1 if len(rows) else 0


def _accumulate(columns: list[TermColumn], scores: np.ndarray) -> None:
    for column in columns:
        for offset, rows, weights in column.parts:
            # rows are unique within a column, so plain fancy-index += is exact (no np.add.at needed)
            scores[offset : offset + _span(rows)][rows] += column.contribution(weights)


def _merge(
    essential: list[TermColumn], columns: list[TermColumn], k: int, eligible: np.ndarray, theta: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Top k among the slots of the `essential` columns, summed per slot without a corpus-sized array.

    With every column essential the per-slot sums are the scores (``bincount`` adds each slot's contributions in
    column order, as the accumulation does). Otherwise slots whose partial sum plus the other columns' bounds
    cannot reach `theta` are dropped first, and only the rest are scored over every column."""
    slots = np.concatenate([c.slots() for c in essential])
    contributions = np.concatenate([c.contribution(w) for c in essential for _, _, w in c.parts])
    unique, inverse = np.unique(slots, return_inverse=True)
    partial = np.bincount(inverse, weights=contributions, minlength=len(unique))
    if len(essential) == len(columns):
        keep = eligible[unique]
        return _select(unique[keep], partial[keep], k)
    kept = {id(c) for c in essential}
    rest_bound = sum(c.bound for c in columns if id(c) not in kept)
    keep = eligible[unique]
    if theta is not None:
        keep &= partial >= (theta - rest_bound) * (1 - _SLACK)
    candidates = unique[keep]
    return _select(candidates, score_slots(candidates, columns), k)


def _seed_threshold(columns: list[TermColumn], k: int, eligible: np.ndarray) -> float | None:
    """The k-th best exact score among up to `_SEED` documents that contain query terms: each term's best-weighted
    postings, short columns whole, the budget left split among long ones' first postings. None when fewer than k
    of them are eligible or theta is not positive."""
    pieces = [c.seeds for c in columns if c.seeds is not None]
    budget = _SEED - sum(len(p) for p in pieces)
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
