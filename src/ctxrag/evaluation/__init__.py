"""Evaluation harness: dataset adapters, retrieval metrics, experiment configs, runner, reports, LLM judge.

Example::

    from ctxrag.evaluation import load_dataset, resolve_configs, EvalRunner, format_table
    ds = load_dataset("anthropic", "../shared/data/contextual-retrieval", contexts=True).sample(20, seed=0)
    results = EvalRunner(ds, ks=[5, 10, 20]).run_all(resolve_configs(["dense", "contextual-hybrid"]))
    print(format_table(results, [5, 10, 20]))
"""
from __future__ import annotations

from ctxrag.evaluation.datasets import CorpusItem, EvalDataset, EvalQuery, load_dataset
from ctxrag.evaluation.experiments import ExperimentConfig, resolve_configs
from ctxrag.evaluation.metrics import hit_rate_at_k, mrr_at_k, ndcg_at_k, pass_at_k, recall_at_k
from ctxrag.evaluation.report import format_table, plot_results, write_json
from ctxrag.evaluation.runner import ConfigResult, EvalRunner

__all__ = [
    "ConfigResult", "CorpusItem", "EvalDataset", "EvalQuery", "EvalRunner", "ExperimentConfig", "format_table",
    "hit_rate_at_k", "load_dataset", "mrr_at_k", "ndcg_at_k", "pass_at_k", "plot_results", "recall_at_k",
    "resolve_configs", "write_json",
]
