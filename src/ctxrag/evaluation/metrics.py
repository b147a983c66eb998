"""Retrieval metrics: pure functions over (ranked ids, gold ids), values in [0, 1].

- ``pass_at_k``: Anthropic's cookbook Pass@k for one query: (gold items found in the top k) / (gold items).
  Averaged over queries it is what the cookbook reports (times 100). It gives partial credit, so it is exactly
  **mean Recall@k**; ``recall_at_k`` is the same formula (kept under its IR name). For sets with one gold item per
  query both equal the hit rate.
- ``hit_rate_at_k``: 1 if any gold item is in the top k.
- ``mrr_at_k``: 1 / rank of the first gold item within the top k, else 0.
- ``ndcg_at_k``: DCG with ``rel / log2(rank + 1)`` (binary, or graded via ``relevance``), over the ideal DCG.

Gold is a list: a gold id listed twice counts twice, as in the cookbook (which loops over golden contents).
Ranked ids are deduplicated (first occurrence kept) before scoring.

Example::

    from ctxrag.evaluation.metrics import pass_at_k, mrr_at_k
    pass_at_k(["a", "x", "b"], ["a", "b", "c"], k=2)   # 1/3
    mrr_at_k(["x", "a"], ["a"], k=10)                  # 0.5
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

METRICS = ("pass", "recall", "hit", "mrr", "ndcg")


def _top(ranked: Sequence[str], k: int) -> list[str]:
    if k < 1:
        raise ValueError(f"k={k} must be >= 1")
    return list(dict.fromkeys(ranked))[:k]


def _gold(gold: Sequence[str]) -> list[str]:
    gold = list(gold)
    if not gold:
        raise ValueError("a query needs at least one gold id to be scored")
    return gold


def pass_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Cookbook Pass@k of one query: found gold / all gold (partial credit)."""
    gold = _gold(gold)
    top = set(_top(ranked, k))
    return sum(1 for g in gold if g in top) / len(gold)


def recall_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Recall@k: relevant retrieved in the top k / relevant. Identical to `pass_at_k` by definition."""
    return pass_at_k(ranked, gold, k)


def hit_rate_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """1.0 if any gold id is in the top k, else 0.0."""
    gold_set = set(_gold(gold))
    return 1.0 if any(r in gold_set for r in _top(ranked, k)) else 0.0


def mrr_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Reciprocal rank of the first gold id within the top k (0.0 if none)."""
    gold_set = set(_gold(gold))
    for rank, r in enumerate(_top(ranked, k), start=1):
        if r in gold_set:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], gold: Sequence[str], k: int,
              relevance: Mapping[str, float] | None = None) -> float:
    """nDCG@k; binary gains unless ``relevance`` grades the gold ids."""
    gold = _gold(gold)
    gains = dict(relevance) if relevance else {g: 1.0 for g in gold}
    for g in gold:
        gains.setdefault(g, 1.0)
    dcg = sum(gains.get(r, 0.0) / math.log2(rank + 1) for rank, r in enumerate(_top(ranked, k), start=1))
    ideal = sorted((v for v in gains.values() if v > 0), reverse=True)[:k]
    idcg = sum(v / math.log2(rank + 1) for rank, v in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


_FUNCS = {"pass": pass_at_k, "recall": recall_at_k, "hit": hit_rate_at_k, "mrr": mrr_at_k}


def score_query(ranked: Sequence[str], gold: Sequence[str], ks: Iterable[int],
                relevance: Mapping[str, float] | None = None,
                metrics: Sequence[str] = METRICS) -> dict[str, float]:
    """Every metric at every k for one query, keyed ``"pass@5"``, ``"ndcg@10"``..."""
    out: dict[str, float] = {}
    for name in metrics:
        if name not in METRICS:
            raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")
        for k in ks:
            if name == "ndcg":
                out[f"ndcg@{k}"] = ndcg_at_k(ranked, gold, k, relevance)
            else:
                out[f"{name}@{k}"] = _FUNCS[name](ranked, gold, k)
    return out


def mean_scores(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Average per-query score dicts key by key (the cookbook averages over all scored queries)."""
    if not per_query:
        raise ValueError("no scored queries to average")
    keys = list(per_query[0])
    return {key: sum(q[key] for q in per_query) / len(per_query) for key in keys}


def parse_ks(text: str | Iterable[int]) -> list[int]:
    """``"5,10,20"`` -> [5, 10, 20] (sorted, unique, each >= 1)."""
    items = [p for p in text.replace(" ", "").split(",") if p] if isinstance(text, str) else list(text)
    try:
        ks = sorted({int(p) for p in items})
    except ValueError:
        raise ValueError(f"k list {text!r} must be comma-separated integers like 5,10,20") from None
    if not ks or ks[0] < 1:
        raise ValueError(f"k list {text!r} must hold integers >= 1")
    return ks
