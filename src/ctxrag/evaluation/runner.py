"""Run retrieval experiments: index each (dataset, contexts variant) once, run every query, score.

Every configuration is built by the product's factory, `ctxrag.retrievers.factory.make_retriever`, over the corpus
as an in-memory `KnowledgeSource` (`ctxrag.evaluation.corpus_index.CorpusSource`): the same stages, depths and
defaults ``kb.as_retriever(mode=..., k=...)`` builds, so a benchmark number is a number for what users run.

The dense index embeds through `make_embeddings` (vectors cached in SQLite by model and text hash), so a second run,
or a second configuration over the same texts, does not re-embed the corpus; within one run the indexes of a variant
are built once and shared by every configuration that uses them. Query embeddings are *not* cached, so every
configuration pays the real per-query cost in its latency.

Example::

    from ctxrag.evaluation.datasets import load_dataset
    from ctxrag.evaluation.experiments import resolve_configs
    from ctxrag.evaluation.runner import EvalRunner
    ds = load_dataset("anthropic", "../shared/data/contextual-retrieval", contexts=True).sample(20)
    runner = EvalRunner(ds, ks=[5, 10, 20])
    for r in runner.run_all(resolve_configs(["dense", "contextual-bm25"])):
        print(r.config.name, r.metrics["pass@5"])
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from pydantic import ConfigDict
from tqdm.auto import tqdm

from ctxrag.compressors import build_reranker
from ctxrag.enums import Reranker, SearchMode
from ctxrag.errors import ConfigError, CtxragError
from ctxrag.evaluation.corpus_index import CorpusSource, QueryEmbeddings, indexed_text
from ctxrag.evaluation.datasets import EvalDataset, load_contexts
from ctxrag.evaluation.experiments import ExperimentConfig
from ctxrag.evaluation.graph_adapter import graph_index_builder
from ctxrag.evaluation.metrics import mean_scores, score_query
from ctxrag.models.embeddings import make_embeddings
from ctxrag.retrievers.factory import RERANK_POOL, make_retriever
from ctxrag.retrievers.modes import MODES
from ctxrag.schema import CHUNK_ID
from ctxrag.settings import Settings, get_settings

log = logging.getLogger(__name__)


@dataclass
class QueryResult:
    """One query under one configuration."""

    query_id: str
    ranked_ids: list[str]
    latency_ms: float
    scores: dict[str, float]


@dataclass
class ConfigResult:
    """Everything measured for one configuration (``to_json`` gives the documented JSON record)."""

    config: ExperimentConfig
    dataset: str
    queries: int
    metrics: dict[str, float] = field(default_factory=dict)
    index_seconds: float = 0.0
    query_ms_p50: float = 0.0
    query_ms_p95: float = 0.0
    missing_gold: int = 0
    dropped_queries: int = 0
    error: str | None = None
    per_query: list[QueryResult] = field(default_factory=list)

    def to_json(self, per_query: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": self.config.model_dump(mode="json"),
            "dataset": self.dataset,
            "queries": self.queries,
            "metrics": {k: round(v, 6) for k, v in self.metrics.items()},
            "index_seconds": round(self.index_seconds, 3),
            "query_ms_p50": round(self.query_ms_p50, 3),
            "query_ms_p95": round(self.query_ms_p95, 3),
            "missing_gold": self.missing_gold,
            "dropped_queries": self.dropped_queries,
        }
        if self.error:
            out["error"] = self.error
        if per_query:
            out["per_query"] = [
                {"id": q.query_id, "ranked_ids": q.ranked_ids, "latency_ms": round(q.latency_ms, 3), "scores": q.scores}
                for q in self.per_query
            ]
        return out


class EvalRunner:
    """Builds indexes lazily and runs configurations over one dataset.

    ``embeddings`` defaults to ``make_embeddings(settings)`` (cached); ``ks`` are the cut-offs to score.
    """

    def __init__(self, dataset: EvalDataset, ks: Sequence[int] = (5, 10, 20), *, settings: Settings | None = None,
                 embeddings: Embeddings | None = None, progress: bool = True,
                 config: RunnableConfig | None = None) -> None:
        self.dataset = dataset
        self.config = config
        """Passed to every retriever call (callbacks, tags): rerankers' and graph LLM calls are traced with it."""
        self.ks = sorted(set(ks))
        self.settings = settings or get_settings()
        self._embeddings = embeddings
        self.progress = progress
        self._variants: dict[str, CorpusSource] = {}
        self._contexts_files: dict[str, dict[str, str]] = {}

    # ------------------------------------------------------------ indexes

    @property
    def embeddings(self) -> Embeddings:
        if self._embeddings is None:
            self._embeddings = make_embeddings(self.settings)
        return self._embeddings

    def _contexts_for(self, config: ExperimentConfig) -> dict[str, str] | None:
        if not config.contextual:
            return None
        if config.contexts_file is not None:
            path = str(config.contexts_file)
            if path not in self._contexts_files:
                ctx = load_contexts(Path(path), self.dataset.extra.get("key_of"))
                self._contexts_files[path] = self.dataset.with_contexts(ctx).contexts or {}
            return self._contexts_files[path]
        if not self.dataset.contexts:
            raise ConfigError(f"config {config.name!r} is contextual but dataset {self.dataset.name!r} has no "
                              "contexts; pass --contexts FILE (JSONL of chunk_id -> context)")
        return self.dataset.contexts

    def source(self, config: ExperimentConfig) -> CorpusSource:
        """The corpus as a knowledge source over the texts this config indexes (plain or with contexts), one per
        distinct text set, its indexes built on first use."""
        contexts = self._contexts_for(config)
        texts = {cid: indexed_text(item.text, (contexts or {}).get(cid)) for cid, item in self.dataset.corpus.items()}
        h = hashlib.sha256()
        for cid, t in texts.items():
            h.update(cid.encode() + b"\x00" + t.encode() + b"\x01")
        key = h.hexdigest()[:16]
        if key not in self._variants:
            graph = None
            if self.dataset.extra.get("openie_file"):
                graph = graph_index_builder(self.dataset, texts, progress=self.progress)
            self._variants[key] = CorpusSource(
                f"{self.dataset.name}:{key}", texts, contents={cid: item.text for cid, item in self.dataset.corpus.items()},
                metadata={cid: item.metadata for cid, item in self.dataset.corpus.items()},
                embeddings=QueryEmbeddings(self.embeddings), settings=self.settings, graph=graph,
                progress=self.progress)
        return self._variants[key]

    # ------------------------------------------------------------ retrievers

    def build_retriever(self, config: ExperimentConfig, k: int) -> tuple[BaseRetriever, float]:
        """The product's retriever for ``config`` returning ``k`` chunks, and the index build seconds it used.

        ``make_retriever(source, mode=config.retrieval, k=k, ...)``: what ``kb.as_retriever`` builds with the same
        options over a knowledge base holding the corpus.
        """
        source = self.source(config)
        mode = config.retrieval
        if mode is SearchMode.GRAPH and source.graph_index() is None:
            graph_index_builder(self.dataset, source.texts)  # raises: the dataset has no triplets
        seconds = source.index_seconds(MODES[mode].indexes)
        pool = config.rerank_pool or RERANK_POOL.get(config.rerank)  # the factory's default for that reranker
        retriever = make_retriever(source, mode=mode, k=k, fusion=config.fusion, weights=config.weights, c=config.c,
                                   rerank=self._reranker(config) or Reranker.NONE, rerank_pool=pool,
                                   document_weight=config.document_weight)
        return retriever, seconds

    def _reranker(self, config: ExperimentConfig) -> Any:
        return build_reranker(config.rerank, self.settings)

    # ------------------------------------------------------------ running

    def run(self, config: ExperimentConfig) -> ConfigResult:
        """Run every query of the dataset under ``config``; errors are raised."""
        ds = self.dataset
        k_max = max(self.ks)
        retriever, index_seconds = self.build_retriever(config, k_max)
        eq = ds.equivalence or {}
        retriever.invoke(ds.queries[0].text, self.config)  # warm-up, untimed: model loading is not query latency
        results: list[QueryResult] = []
        for q in tqdm(ds.queries, desc=config.name, unit="q", disable=not self.progress, leave=False):
            start = time.perf_counter()
            docs = retriever.invoke(q.text, self.config)
            ms = (time.perf_counter() - start) * 1000
            ranked = [str(d.metadata.get(CHUNK_ID, d.id)) for d in docs]
            scores = score_query([eq.get(r, r) for r in ranked], [eq.get(g, g) for g in q.gold_ids], self.ks,
                                 relevance={eq.get(g, g): s for g, s in q.relevance.items()} if q.relevance else None)
            results.append(QueryResult(q.id, ranked, ms, scores))
        lat = np.asarray([r.latency_ms for r in results], dtype=float)
        return ConfigResult(
            config=config, dataset=ds.name, queries=len(results), metrics=mean_scores([r.scores for r in results]),
            index_seconds=index_seconds, query_ms_p50=float(np.percentile(lat, 50)),
            query_ms_p95=float(np.percentile(lat, 95)), missing_gold=len(ds.missing_gold),
            dropped_queries=len(ds.dropped_queries), per_query=results,
        )

    def run_all(self, configs: Sequence[ExperimentConfig], *, stop_on_error: bool = False) -> list[ConfigResult]:
        """Run each config in turn; a failing config is recorded with its error (or raised with ``stop_on_error``)."""
        out: list[ConfigResult] = []
        for cfg in configs:
            try:
                out.append(self.run(cfg))
            except (CtxragError, ValueError, ImportError) as e:
                if stop_on_error:
                    raise
                log.error("config %s failed: %s", cfg.name, e)
                out.append(ConfigResult(config=cfg, dataset=self.dataset.name, queries=0, error=str(e)))
        return out


class TopK(BaseRetriever):
    """The first ``k`` documents of ``base`` (for answering with a fixed number of chunks)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base: BaseRetriever
    k: int = 4

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self.base.invoke(query, {"callbacks": run_manager.get_child()})[: self.k]
