from __future__ import annotations

import math

import pytest

from ctxrag.evaluation.metrics import (
    hit_rate_at_k,
    mean_scores,
    mrr_at_k,
    ndcg_at_k,
    parse_ks,
    pass_at_k,
    recall_at_k,
    score_query,
)


def test_pass_at_k_gives_partial_credit() -> None:
    assert pass_at_k(["a", "x", "b"], ["a", "b", "c"], k=2) == pytest.approx(1 / 3)
    assert pass_at_k(["a", "x", "b"], ["a", "b", "c"], k=3) == pytest.approx(2 / 3)
    assert pass_at_k(["x", "y"], ["a"], k=2) == 0.0
    assert recall_at_k(["a", "x", "b"], ["a", "b", "c"], k=3) == pass_at_k(["a", "x", "b"], ["a", "b", "c"], k=3)


def test_duplicate_ranked_ids_count_once_and_do_not_take_slots() -> None:
    # "a" twice must not push "b" out of the top 2
    assert pass_at_k(["a", "a", "b"], ["a", "b"], k=2) == 1.0


def test_hit_rate_and_mrr() -> None:
    assert hit_rate_at_k(["x", "b"], ["a", "b"], k=2) == 1.0
    assert hit_rate_at_k(["x", "b"], ["a", "b"], k=1) == 0.0
    assert mrr_at_k(["x", "y", "a"], ["a", "b"], k=10) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "a"], ["a"], k=2) == 0.0


def test_ndcg_binary_and_graded() -> None:
    assert ndcg_at_k(["a", "b"], ["a", "b"], k=2) == pytest.approx(1.0)
    # one relevant at rank 2 of one gold: 1/log2(3)
    assert ndcg_at_k(["x", "a"], ["a"], k=2) == pytest.approx(1 / math.log2(3))
    graded = {"a": 2.0, "b": 1.0}
    worse = ndcg_at_k(["b", "a"], ["a", "b"], k=2, relevance=graded)
    assert worse == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert ndcg_at_k(["a", "b"], ["a", "b"], k=2, relevance=graded) == pytest.approx(1.0)


def test_score_query_keys_and_mean() -> None:
    s = score_query(["a", "x"], ["a", "b"], [1, 2])
    assert set(s) == {f"{m}@{k}" for m in ("pass", "recall", "hit", "mrr", "ndcg") for k in (1, 2)}
    avg = mean_scores([{"pass@1": 1.0}, {"pass@1": 0.0}, {"pass@1": 0.5}])
    assert avg == {"pass@1": pytest.approx(0.5)}


def test_errors() -> None:
    with pytest.raises(ValueError, match="k=0"):
        pass_at_k(["a"], ["a"], k=0)
    with pytest.raises(ValueError, match="gold"):
        pass_at_k(["a"], [], k=1)
    with pytest.raises(ValueError, match="unknown metric"):
        score_query(["a"], ["a"], [1], metrics=["map"])
    with pytest.raises(ValueError, match="no scored queries"):
        mean_scores([])


def test_parse_ks() -> None:
    assert parse_ks("20, 5,10,5") == [5, 10, 20]
    with pytest.raises(ValueError, match="integers"):
        parse_ks("5,ten")
    with pytest.raises(ValueError, match=">= 1"):
        parse_ks("0,5")
