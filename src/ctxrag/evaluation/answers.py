"""Answer-quality evaluation: retrieve with a configuration, answer with the RAG chain, judge with an LLM.

Per configuration: ``answer_score`` (mean of (score - 1) / 4 of the 1-5 correctness judgement, against the reference
answer when the dataset has one), ``faithfulness`` (same scale, answer vs retrieved context), their raw 1-5 means,
and how many judge replies had no parsable score (those are left out of the means, not guessed).

Example::

    from ctxrag.evaluation.answers import run_answer_eval
    results = run_answer_eval(runner, configs, llm=make_chat_model(max_tokens=256), k=4)
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.language_models import BaseChatModel
from tqdm.auto import tqdm

from ctxrag.errors import CtxragError
from ctxrag.evaluation.experiments import ExperimentConfig
from ctxrag.evaluation.judge import AnswerJudge, Judgement
from ctxrag.evaluation.runner import ConfigResult, EvalRunner

log = logging.getLogger(__name__)


@dataclass
class AnswerRecord:
    """One query's answer and its two judgements."""

    query_id: str
    question: str
    answer: str
    reference: str | None
    retrieved_ids: list[str]
    correctness: Judgement
    faithfulness: Judgement
    answer_ms: float


@dataclass
class AnswerResult(ConfigResult):
    """A `ConfigResult` whose metrics are answer metrics, plus the per-query records."""

    records: list[AnswerRecord] = field(default_factory=list)

    def to_json(self, per_query: bool = False) -> dict[str, Any]:
        out = super().to_json(per_query=False)
        if per_query:
            out["per_query"] = [
                {"id": r.query_id, "question": r.question, "answer": r.answer, "reference": r.reference,
                 "retrieved_ids": r.retrieved_ids, "score": r.correctness.score, "reason": r.correctness.reason,
                 "faithfulness": r.faithfulness.score, "faithfulness_reason": r.faithfulness.reason,
                 "answer_ms": round(r.answer_ms, 1)}
                for r in self.records
            ]
        return out


def _mean(values: list[float | None]) -> tuple[float, int]:
    got = [v for v in values if v is not None]
    return (float(np.mean(got)) if got else 0.0), len(values) - len(got)


def answer_metrics(records: Sequence[AnswerRecord]) -> dict[str, float]:
    """Aggregate judgements; unparsed judge replies are excluded from the means and counted."""
    score, bad_score = _mean([r.correctness.normalized for r in records])
    faith, bad_faith = _mean([r.faithfulness.normalized for r in records])
    return {
        "answer_score": score,
        "faithfulness": faith,
        "answer_score_1to5": 1 + 4 * score,
        "faithfulness_1to5": 1 + 4 * faith,
        "judge_unparsed": float(bad_score + bad_faith),
    }


def run_answer_eval(runner: EvalRunner, configs: Sequence[ExperimentConfig], llm: BaseChatModel, *, k: int = 4,
                    judge_llm: BaseChatModel | None = None) -> list[AnswerResult]:
    """Answer every query of ``runner.dataset`` with the top ``k`` chunks of each config, then judge."""
    from ctxrag.chains.rag import build_rag_chain

    judge = AnswerJudge(judge_llm or llm)
    out: list[AnswerResult] = []
    ds = runner.dataset
    for cfg in configs:
        try:
            retriever, index_seconds = runner.build_retriever(cfg, k)
            from ctxrag.evaluation.runner import TopK

            chain = build_rag_chain(TopK(base=retriever, k=k), llm)
            records: list[AnswerRecord] = []
            for q in tqdm(ds.queries, desc=f"answers {cfg.name}", unit="q", disable=not runner.progress, leave=False):
                start = time.perf_counter()
                res = chain.invoke(q.text)
                ms = (time.perf_counter() - start) * 1000
                docs = res["documents"]
                answer = str(res.get("answer", ""))
                records.append(AnswerRecord(
                    q.id, q.text, answer, q.answer, [str(d.metadata.get("chunk_id", d.id)) for d in docs],
                    judge.correctness(q.text, answer, q.answer),
                    judge.faithfulness(answer, [d.page_content for d in docs]), ms))
            lat = np.asarray([r.answer_ms for r in records], dtype=float)
            out.append(AnswerResult(
                config=cfg, dataset=ds.name, queries=len(records), metrics=answer_metrics(records),
                index_seconds=index_seconds, query_ms_p50=float(np.percentile(lat, 50)),
                query_ms_p95=float(np.percentile(lat, 95)), missing_gold=len(ds.missing_gold),
                dropped_queries=len(ds.dropped_queries), records=records))
        except (CtxragError, ValueError, ImportError) as e:
            log.error("config %s failed: %s", cfg.name, e)
            out.append(AnswerResult(config=cfg, dataset=ds.name, queries=0, error=str(e)))
    return out


def format_answer_table(results: Sequence[AnswerResult]) -> str:
    """Markdown table of answer metrics (1-5 means and [0, 1] fractions)."""
    head = ["configuration", "queries", "answer 1-5", "faithfulness 1-5", "answer [0,1]", "faithfulness [0,1]",
            "unparsed", "ms p50"]
    rows = []
    for r in results:
        if r.error:
            rows.append([r.config.name, "0", "—", "—", "—", "—", "—", f"error: {r.error[:80]}"])
            continue
        m = r.metrics
        rows.append([r.config.name, str(r.queries), f"{m['answer_score_1to5']:.2f}", f"{m['faithfulness_1to5']:.2f}",
                     f"{m['answer_score']:.3f}", f"{m['faithfulness']:.3f}", f"{int(m['judge_unparsed'])}",
                     f"{r.query_ms_p50:.0f}"])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(lines)
