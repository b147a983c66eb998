"""Query evaluation (`ctxrag.stores.bm25.query`): every plan (direct merge, MaxScore, thresholded accumulation)
returns exactly the top k of a brute-force ranking, against rank_bm25 on a head-heavy Zipf corpus large enough to
take the pruned plans, with filters, deletes, and cached weights dropped on every change."""
from __future__ import annotations

import numpy as np
import pytest
import rank_bm25

from ctxrag.stores.bm25 import BM25Index
from ctxrag.stores.bm25 import query as query_module
from ctxrag.stores.bm25.query import Accumulator, TermColumn, score_slots, top_k, top_k_slots


def zipf_docs(n_docs: int, seed: int = 0, vocab: int = 2000) -> tuple[list[list[str]], list[list[str]]]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** 1.05
    p /= p.sum()
    docs = [[f"t{i}" for i in rng.choice(vocab, size=rng.integers(10, 40), p=p)] for _ in range(n_docs)]
    queries = [[f"t{i}" for i in rng.choice(vocab, size=rng.integers(2, 7), p=p)] for _ in range(60)]
    # head-only queries (everything essential) and a rare + head mix (MaxScore drops the head terms)
    queries += [["t0", "t1"], ["t0", "t1", "t2", "t3"], ["t1999", "t0", "t1"], ["t0", "t0", "t5"]]
    return docs, queries


def reference_top(scores: np.ndarray, docs: list[list[str]], tokens: list[str], k: int,
                  eligible: np.ndarray | None = None) -> list[int]:
    """Brute force: every document containing a query term, by score, ties by position."""
    terms = set(tokens)
    keep = [i for i in np.argsort(-scores, kind="stable") if terms & set(docs[i])
            and (eligible is None or eligible[i])]
    return keep[:k]


def check_top(index: BM25Index, reference: rank_bm25.BM25Okapi, docs: list[list[str]], tokens: list[str], k: int,
              top: list[int], eligible: np.ndarray | None = None) -> None:
    """`top` is exactly the brute-force top k over the index's own full scores (`get_scores`, the plain
    accumulation), and those equal rank_bm25's. Ranks are compared on our scores because rank_bm25 sums the same
    terms with different rounding, which reorders documents whose scores differ in the last bit."""
    ours = index.get_scores(tokens)
    np.testing.assert_allclose(ours, reference.get_scores(tokens), rtol=1e-9)
    assert top == reference_top(ours, docs, tokens, k, eligible), tokens


@pytest.fixture(scope="module")
def zipf():
    return zipf_docs(3000)


@pytest.fixture(params=["default", "merge", "accumulate"])
def plan(request, monkeypatch):
    """Run a test under the default plan choice, with every query merged, and with every query accumulated."""
    if request.param == "merge":
        monkeypatch.setattr(query_module, "SPARSE_MIN", 10**9)
    elif request.param == "accumulate":
        monkeypatch.setattr(query_module, "SPARSE_MIN", 0)
        monkeypatch.setattr(query_module, "SPARSE_FRACTION", 10**9)
    return request.param


def test_plans_are_exercised(zipf, monkeypatch):
    """The corpus and queries reach every plan, so the exactness tests below cover each of them."""
    docs, queries = zipf
    monkeypatch.setattr(query_module, "SPARSE_MIN", 2000)
    index = BM25Index(tokenizer=str.split)
    index.add_tokens(docs)
    seen = []
    for name in ("_merge", "_accumulate"):
        original = getattr(query_module, name)
        monkeypatch.setattr(query_module, name,
                            lambda *a, _o=original, _n=name: (seen.append((_n, len(a[0]))), _o(*a))[1])
    for tokens in queries:
        index.search_slots(tokens, 10)
    plans = {name for name, _ in seen}
    assert plans == {"_merge", "_accumulate"}
    # MaxScore: a merge over fewer columns than the query has
    assert any(name == "_merge" and n < len(set(q)) for (name, n), q in zip(seen, queries))


@pytest.mark.parametrize("k", [1, 10, 100])
def test_top_k_equals_rank_bm25_on_a_head_heavy_corpus(zipf, k, plan):
    docs, queries = zipf
    index = BM25Index(tokenizer=str.split)
    index.add_tokens(docs)
    reference = rank_bm25.BM25Okapi(docs)
    for tokens in queries:
        slots, scores = index.search_slots(tokens, k)
        check_top(index, reference, docs, tokens, k, slots.tolist())
        assert scores.tolist() == index.get_scores(tokens)[slots].tolist()


def test_filters_and_incremental_changes_stay_exact(zipf, plan):
    docs, queries = zipf
    rng = np.random.default_rng(3)
    index = BM25Index(tokenizer=str.split)
    ids = [f"d{i}" for i in range(len(docs))]
    for start in range(0, len(docs), 700):  # several segments, queried between adds: weights refilled each time
        index.add_tokens(docs[start : start + 700], ids=ids[start : start + 700])
        index.search(queries[0], k=5)
    doomed = rng.choice(len(docs), size=400, replace=False)
    index.delete([ids[i] for i in doomed])
    live = np.ones(len(docs), dtype=bool)
    live[doomed] = False
    survivors = [d for d, keep in zip(docs, live) if keep]
    surviving_ids = [i for i, keep in zip(ids, live) if keep]
    reference = rank_bm25.BM25Okapi(survivors)
    allowed = rng.random(len(survivors)) < 0.3
    allowed_ids = {i for i, a in zip(surviving_ids, allowed) if a}
    for tokens in queries:
        ours = [surviving_ids.index(i) for i, _ in index.search(tokens, k=10)]
        check_top(index, reference, survivors, tokens, 10, ours)
        filtered = [surviving_ids.index(i) for i, _ in index.search(tokens, k=10, allowed_ids=allowed_ids)]
        check_top(index, reference, survivors, tokens, 10, filtered, allowed)


def test_top_k_slots_matches_brute_force_with_ties(plan):
    rng = np.random.default_rng(0)
    n = 20_000
    columns = []
    for scale, density in [(1.0, 0.9), (2.0, 0.5), (3.0, 0.01)]:
        rows = np.flatnonzero(rng.random(n) < density).astype(np.int32)
        weights = rng.integers(1, 4, size=len(rows)).astype(np.float64)  # few distinct values: many exact ties
        columns.append(TermColumn([(0, rows, weights)], scale))
    eligible = rng.random(n) < 0.8
    dense = np.zeros(n)
    hit = np.zeros(n, dtype=bool)
    for column in columns:
        (_, rows, weights), = column.parts
        dense[rows] += column.scale * weights
        hit[rows] = True
    candidates = np.flatnonzero(hit & eligible)
    for k in (1, 10, 500):
        expected = candidates[top_k(dense[candidates], k)]
        slots, scores = top_k_slots(columns, k, eligible, Accumulator())
        assert slots.tolist() == expected.tolist()
        assert scores.tolist() == dense[expected].tolist()  # bit-for-bit: same summation order on every plan


def test_columns_split_over_segments_are_looked_up_with_offsets():
    first = TermColumn([(0, np.array([1, 3], dtype=np.int32), np.array([1.0, 2.0])),
                        (5, np.array([0, 2], dtype=np.int32), np.array([4.0, 8.0]))], scale=1.0)
    np.testing.assert_array_equal(score_slots(np.array([1, 3, 4, 5, 7]), [first]), [1.0, 2.0, 0.0, 4.0, 8.0])
    assert first.slots().tolist() == [1, 3, 5, 7] and first.slots(3).tolist() == [1, 3, 5]
    assert first.bound == 8.0


def test_accumulator_is_zeroed_after_use_and_not_shared_while_busy():
    acc = Accumulator()
    with acc.borrow(4) as a:
        a += 1
        with acc.borrow(4) as b:  # busy: a fresh buffer, not the same one
            assert b is not a and not b.any()
    with acc.borrow(4) as c:
        assert c is a and not c.any()
