"""Run retrieval experiments: build each index once per (dataset, contexts variant), run every query, score.

The dense index embeds through `make_embeddings` (vectors cached in SQLite by model and text hash), so a second run,
or a second configuration over the same texts, does not re-embed the corpus; within one run the FAISS and BM25
indexes of a variant are built once and shared by every configuration that uses them. Query embeddings are *not*
cached, so every configuration pays the real per-query cost in its latency.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.runnables import RunnableConfig
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict
from tqdm.auto import tqdm

from ctxrag.errors import ConfigError, CtxragError
from ctxrag.evaluation.datasets import EvalDataset, load_contexts
from ctxrag.evaluation.experiments import ExperimentConfig, RerankMode, RetrievalMode
from ctxrag.evaluation.metrics import mean_scores, score_query
from ctxrag.schema import CHUNK_ID, SCORE
from ctxrag.settings import Settings, get_settings
from ctxrag.stores.base import IndexedChunk

log = logging.getLogger(__name__)

EMBED_BATCH = 32


class NotAvailableError(CtxragError):
    """A configuration needs a component that is not installed or not written yet."""


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


class IndexRetriever(BaseRetriever):
    """A LangChain retriever over a ``search(query, k) -> [(chunk_id, score)]`` function and the eval corpus.

    Example::

        IndexRetriever(search=lambda q, k: [("a", 1.0)], texts={"a": "alpha"}, k=5, score_key="bm25_score")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    search: Callable[[str, int], list[tuple[str, float]]]
    texts: dict[str, str]
    k: int = 10
    score_key: str = SCORE

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [
            Document(page_content=self.texts[cid], id=cid,
                     metadata={CHUNK_ID: cid, SCORE: float(s), self.score_key: float(s)})
            for cid, s in self.search(query, self.k)
        ]


@dataclass
class _Variant:
    key: str
    texts: dict[str, str]
    dense: Any = None
    dense_seconds: float = 0.0
    bm25: Any = None
    bm25_seconds: float = 0.0
    graph: Any = None
    graph_seconds: float = 0.0


def indexed_text(text: str, context: str | None) -> str:
    """What a contextual index sees: ``context + "\\n\\n" + chunk`` (the chunk alone without a context)."""
    return f"{context.strip()}\n\n{text}" if context and context.strip() else text


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
        self._variants: dict[str, _Variant] = {}
        self._contexts_files: dict[str, dict[str, str]] = {}

    # ------------------------------------------------------------ indexes

    @property
    def embeddings(self) -> Embeddings:
        if self._embeddings is None:
            from ctxrag.models.embeddings import make_embeddings

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

    def variant(self, config: ExperimentConfig) -> _Variant:
        """The corpus texts this config indexes (plain or with contexts), built once per distinct text set."""
        contexts = self._contexts_for(config)
        texts = {cid: indexed_text(item.text, (contexts or {}).get(cid)) for cid, item in self.dataset.corpus.items()}
        h = hashlib.sha256()
        for cid, t in texts.items():
            h.update(cid.encode() + b"\x00" + t.encode() + b"\x01")
        key = h.hexdigest()[:16]
        if key not in self._variants:
            self._variants[key] = _Variant(key=key, texts=texts)
        return self._variants[key]

    def _dense(self, v: _Variant) -> Any:
        if v.dense is None:
            from ctxrag.models.embeddings import embed_array
            from ctxrag.stores.dense import FaissIndex

            start = time.perf_counter()
            ids = list(v.texts)
            chunks: list[IndexedChunk] = []
            bar = tqdm(total=len(ids), desc="embedding corpus", unit="chunk", disable=not self.progress, leave=False)
            for i in range(0, len(ids), EMBED_BATCH):
                part = ids[i : i + EMBED_BATCH]
                vecs = embed_array(self.embeddings, [v.texts[c] for c in part], is_query=False)
                chunks.extend(IndexedChunk(c, c, v.texts[c], self.dataset.corpus[c].text, vector=vec)
                              for c, vec in zip(part, vecs))
                bar.update(len(part))
            bar.close()
            index = FaissIndex()
            index.add(chunks)
            v.dense, v.dense_seconds = index, time.perf_counter() - start
        return v.dense

    def _bm25(self, v: _Variant) -> Any:
        if v.bm25 is None:
            try:
                from ctxrag.stores.bm25 import BM25ChunkIndex
            except ImportError as e:
                raise NotAvailableError(f"BM25 index is not available yet (ctxrag.stores.bm25.BM25ChunkIndex): {e}") from None
            start = time.perf_counter()
            index = BM25ChunkIndex()
            index.add([IndexedChunk(c, c, t, self.dataset.corpus[c].text) for c, t in v.texts.items()])
            v.bm25, v.bm25_seconds = index, time.perf_counter() - start
        return v.bm25

    def _query_vector(self, query: str) -> np.ndarray:
        from ctxrag.models.embeddings import embed_array

        # the uncached model: latency should include embedding the query, as in real use
        model = getattr(self.embeddings, "inner", self.embeddings)
        return embed_array(model, [query], is_query=True)[0]

    # ------------------------------------------------------------ retrievers

    def build_retriever(self, config: ExperimentConfig, k: int) -> tuple[BaseRetriever, float]:
        """The LangChain retriever for ``config`` returning at least ``k`` ids, and the index build seconds it used."""
        v = self.variant(config)
        depth = max(config.fetch_k, k)
        seconds = 0.0
        parts: list[BaseRetriever] = []
        if config.retrieval is RetrievalMode.GRAPH:
            return self._graph_retriever(config, v, depth)
        if config.retrieval in (RetrievalMode.DENSE, RetrievalMode.HYBRID):
            dense = self._dense(v)
            seconds += v.dense_seconds
            parts.append(IndexRetriever(search=lambda q, kk: dense.search(self._query_vector(q), kk), texts=v.texts,
                                        k=depth, score_key="dense_score", name="dense"))
        if config.retrieval in (RetrievalMode.BM25, RetrievalMode.HYBRID):
            bm25 = self._bm25(v)
            seconds += v.bm25_seconds
            parts.append(IndexRetriever(search=lambda q, kk: bm25.search(q, kk), texts=v.texts, k=depth,
                                        score_key="bm25_score", name="bm25"))
        retriever: BaseRetriever = parts[0]
        if len(parts) > 1:
            from ctxrag.retrievers.fusion import FusionRetriever

            from ctxrag.retrievers.fusion import LANGUAGE_DEFAULTS

            auto = config.fusion == "auto"  # the library default: per query language, as `make_retriever` does
            retriever = FusionRetriever(retrievers=parts, weights=config.weights, mode="rrf" if auto else config.fusion,
                                        c=config.c, k=depth, name="hybrid",
                                        by_language=dict(LANGUAGE_DEFAULTS) if auto and not config.weights else None)
        if config.rerank is not RerankMode.NONE:
            retriever = RerankedRetriever(base=retriever, reranker=self._reranker(config), top_n=config.rerank_top_n)
        return retriever, seconds

    def _reranker(self, config: ExperimentConfig) -> Any:
        try:
            from ctxrag.compressors import build_reranker
        except ImportError as e:
            raise NotAvailableError(f"rerank={config.rerank.value} is not available yet (ctxrag.compressors.build_reranker): {e}") from None
        return build_reranker(config.rerank.value, self.settings)

    def _graph_retriever(self, config: ExperimentConfig, v: _Variant, k: int) -> tuple[BaseRetriever, float]:
        try:
            from ctxrag.evaluation.graph_adapter import build_graph_retriever
        except ImportError as e:
            raise NotAvailableError(f"graph retrieval is not available yet: {e}") from None
        if v.graph is None:
            start = time.perf_counter()
            v.graph = build_graph_retriever(self, v, k)
            v.graph_seconds = time.perf_counter() - start
        return v.graph, v.graph_seconds

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


class RerankedRetriever(BaseRetriever):
    """Reranks the first ``top_n`` candidates of ``base`` with a document compressor; the rest keep their order after.

    Keeping the tail means Pass@20 is still defined when only 10 are reranked.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base: BaseRetriever
    reranker: Any
    top_n: int = 20

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        callbacks = run_manager.get_child()
        docs = self.base.invoke(query, {"callbacks": callbacks})
        head, tail = docs[: self.top_n], docs[self.top_n :]
        ranked = list(self.reranker.compress_documents(head, query, callbacks=callbacks))
        seen = {str(d.metadata.get(CHUNK_ID, d.id)) for d in ranked}
        rest = [d for d in head if str(d.metadata.get(CHUNK_ID, d.id)) not in seen]
        return ranked + rest + tail
