"""End-to-end answer accuracy: retrieve with a configuration, answer with the real RAG chain, score the answer.

Two kinds of sets:

- **short-answer sets** (SQuAD-format DRCD/CMRC, MuSiQue): exact match and F1 against the reference answers
  (`ctxrag.evaluation.answer_metrics`: CMRC rules for Chinese, SQuAD rules for English, best over the references),
  ``cited_contains`` (share of answers whose cited chunks contain a reference answer) and seconds per answer. With
  ``answer_style="short"`` the chain answers through `ExtractiveAnswer`, the optional answer step asking for the
  answer phrase alone and returning its source span (a documented chain part, not a scorer trick). The LLM judge is optional here.
- **key-fact sets** (the demo's questions, ``examples/sample_questions.json``): each question ships a ``key_facts``
  list; an answer is right when it states every key fact. The LLM judge (`AnswerJudge`) is reported beside it for
  these long answers, never alone.

Example::

    from ctxrag.evaluation.answers import run_answer_eval
    results = run_answer_eval(runner, configs, llm=make_chat_model(max_tokens=64), k=4, judge=False,
                              answer_style="short")
    print(format_answer_table(results))
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable
from tqdm.auto import tqdm

from ctxrag.chains.ask import build_ask_chain
from ctxrag.chains.evidence import EvidenceCheck, default_evidence_check
from ctxrag.chains.relevance import RelevanceGate
from ctxrag.chains.short_answer import READING_SCRIPTS, ExtractiveAnswer
from ctxrag.enums import SearchMode
from ctxrag.errors import CtxragError, LoadError
from ctxrag.evaluation.answer_metrics import contains_answer, exact_match, f1_score, key_fact_hits
from ctxrag.evaluation.datasets import EvalQuery
from ctxrag.evaluation.experiments import ExperimentConfig
from ctxrag.evaluation.judge import AnswerJudge, Judgement
from ctxrag.evaluation.runner import ConfigResult, EvalRunner, TopK
from ctxrag.evaluation.stock_chain import STOCK_NAME, stock_answer_chain
from ctxrag.stores.protocols import KnowledgeSource

log = logging.getLogger(__name__)


@dataclass
class AnswerRecord:
    """One query's answer, its scores and (when the judge ran) its two judgements."""

    query_id: str
    question: str
    answer: str
    reference: str | None
    retrieved_ids: list[str]
    correctness: Judgement | None
    faithfulness: Judgement | None
    answer_ms: float
    references: list[str] = field(default_factory=list)
    cited_ids: list[str] = field(default_factory=list)
    em: float | None = None
    f1: float | None = None
    cited_contains: bool | None = None
    key_facts: list[bool] | None = None
    model_answer: str | None = None
    """The model's own phrase when the chain answered with a source span instead (the short answer style)."""
    model_f1: float | None = None
    supported: bool | None = None
    """The chain's verdict (False: the gate or the evidence check abstained); None where it has none."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.query_id, "question": self.question, "answer": self.answer, "reference": self.reference,
            "references": self.references, "retrieved_ids": self.retrieved_ids, "cited_ids": self.cited_ids,
            "em": self.em, "f1": self.f1, "cited_contains": self.cited_contains, "key_facts": self.key_facts,
            "answer_ms": round(self.answer_ms, 1), "supported": self.supported,
        }
        if self.model_answer is not None:
            out.update(model_answer=self.model_answer, model_f1=self.model_f1)
        if self.correctness is not None:
            out.update(score=self.correctness.score, reason=self.correctness.reason)
        if self.faithfulness is not None:
            out.update(faithfulness=self.faithfulness.score, faithfulness_reason=self.faithfulness.reason)
        return out


@dataclass
class AnswerResult(ConfigResult):
    """A `ConfigResult` whose metrics are answer metrics, plus the per-query records."""

    records: list[AnswerRecord] = field(default_factory=list)
    evidence: str | None = None
    """The evidence check the chain answered with (one of `EVIDENCE_CHECKS`); None for a chain without that choice
    (the stock LangChain chain)."""
    focus: int | None = None
    """The chain's ``answer_focus_chars`` when the run chose it (0: whole chunks); None: the setting's."""

    def to_json(self, per_query: bool = False) -> dict[str, Any]:
        out = super().to_json(per_query=False)
        if self.evidence is not None:
            out["evidence"] = self.evidence
        if self.focus is not None:
            out["focus"] = self.focus
        if per_query:
            out["per_query"] = [r.to_json() for r in self.records]
        return out


def _mean(values: Sequence[float | None]) -> tuple[float | None, int]:
    got = [v for v in values if v is not None]
    return (float(np.mean(got)) if got else None), len(values) - len(got)


def answer_metrics(records: Sequence[AnswerRecord]) -> dict[str, float]:
    """Aggregate the records: EM/F1/cited_contains/key facts where scored, judge means where judged (unparsed judge
    replies are excluded from the means and counted), and seconds per answer (p50)."""
    out: dict[str, float] = {}
    if not records:
        return out
    for key in ("em", "f1", "model_f1"):
        mean, _ = _mean([getattr(r, key) for r in records])
        if mean is not None:
            out[key] = mean
    cited, _ = _mean([None if r.cited_contains is None else float(r.cited_contains) for r in records])
    if cited is not None:
        out["cited_contains"] = cited
    facts = [r.key_facts for r in records if r.key_facts is not None]
    if facts:
        out["key_facts_all"] = float(np.mean([all(f) for f in facts]))
        out["key_facts_share"] = float(np.mean([np.mean(f) if f else 1.0 for f in facts]))
        out["answers_right"] = float(sum(all(f) for f in facts))
    judged = [r for r in records if r.correctness is not None]
    if judged:
        score, bad_score = _mean([r.correctness.normalized for r in judged if r.correctness])
        faith, bad_faith = _mean([r.faithfulness.normalized for r in judged if r.faithfulness])
        score, faith = score or 0.0, faith or 0.0
        out.update(answer_score=score, faithfulness=faith, answer_score_1to5=1 + 4 * score,
                   faithfulness_1to5=1 + 4 * faith, judge_unparsed=float(bad_score + bad_faith))
    out["s_per_answer_p50"] = float(np.percentile([r.answer_ms for r in records], 50)) / 1000
    return out


def references_of(query: EvalQuery) -> list[str]:
    """All reference answers of a query: SQuAD ``answers``, MuSiQue ``answer`` + ``answer_aliases``."""
    refs = [query.answer] if query.answer else []
    for key in ("answers", "answer_aliases"):
        refs += [str(a) for a in (query.metadata.get(key) or []) if a]
    return list(dict.fromkeys(r.strip() for r in refs if r and r.strip()))


ANSWER_STYLES = ("full", "short")
"""``full``: the chain's cited answer; ``short``: the source span from `ExtractiveAnswer`."""


def answer_step(llm: BaseChatModel, answer_style: str, reading_script: str = "auto") -> Runnable[Any, Any] | None:
    """The answer step of `build_ask_chain` for an answer style: None (the chain's own) for ``"full"``, an
    `ExtractiveAnswer` for ``"short"``; ValueError naming a bad style or a reading script without short answers."""
    if answer_style not in ANSWER_STYLES:
        raise ValueError(f"answer_style must be one of {ANSWER_STYLES}, got {answer_style!r}")
    if reading_script not in READING_SCRIPTS:
        raise ValueError(f"reading_script must be one of {READING_SCRIPTS}, got {reading_script!r}")
    if answer_style == "full":
        if reading_script == "simplified":
            raise ValueError("reading_script='simplified' needs answer_style='short' (a full answer would come back "
                             "in Simplified script)")
        return None
    return ExtractiveAnswer(llm, reading_script=reading_script)


EVIDENCE_CHECKS = ("default", "plain", "off")
"""The evidence check an answer run's chain uses: ``default``, the product's (`default_evidence_check`: the key-term
stages over the knowledge base's BM25, as ``ctxrag ask``, ``/ask`` and the assistant); ``plain``, `EvidenceCheck` at
its plain thresholds without key terms (what the answer pages' rows before the product's check were measured with);
``off``, none."""


def _known_check(name: str) -> str:
    if name not in EVIDENCE_CHECKS:
        raise ValueError(f"evidence must be one of {EVIDENCE_CHECKS}, got {name!r}")
    return name


def evidence_check(llm: BaseChatModel, kb: KnowledgeSource, name: str) -> EvidenceCheck | Literal[False]:
    """The evidence check named ``name`` (one of `EVIDENCE_CHECKS`) over ``llm`` and ``kb``, as `build_ask_chain`'s
    ``evidence`` takes it (False: ``off``, whatever the settings say); ValueError naming a bad name.

    >>> evidence_check(llm, kb, "plain").key_terms is None  # doctest: +SKIP
    True
    """
    if _known_check(name) == "off":
        return False
    return default_evidence_check(llm, kb) if name == "default" else EvidenceCheck(llm)


def evidence_arms(evidence: str | Sequence[str]) -> list[str]:
    """The evidence checks to answer with, in order, each once; ValueError naming a bad one or none given."""
    arms = list(dict.fromkeys([evidence] if isinstance(evidence, str) else evidence))
    if not arms:
        raise ValueError(f"evidence: name at least one of {EVIDENCE_CHECKS}")
    return [_known_check(name) for name in arms]


def focus_arms(focus: int | Sequence[int] | None) -> list[int | None]:
    """The ``answer_focus_chars`` arms to answer with, in order, each once (None: the setting's, one arm);
    ValueError naming a negative one."""
    arms: list[int | None] = list(dict.fromkeys([focus] if focus is None or isinstance(focus, int) else focus))
    bad = [a for a in arms if a is not None and a < 0]
    if bad or not arms:
        raise ValueError(f"focus: characters >= 0 (0: whole chunks), got {bad[0] if bad else focus!r}")
    return arms


def arm_config(config: ExperimentConfig, evidence: str, arms: Sequence[str], focus: int | None = None,
               focus_arms: Sequence[int | None] = ()) -> ExperimentConfig:
    """``config`` named for its arm when a run compares several evidence checks or focus lengths (``hybrid
    evidence=plain``, ``hybrid focus=300``), as it is otherwise."""
    name = config.name
    if len(arms) > 1:
        name += f" evidence={evidence}"
    if len(focus_arms) > 1:
        name += f" focus={focus}"
    return config if name == config.name else config.model_copy(update={"name": name})


def answer_one(chain: Runnable[Any, Any], question: str) -> tuple[dict[str, Any], float]:
    """Run the chain on one question; its output dict and the milliseconds it took."""
    start = time.perf_counter()
    res = chain.invoke(question)
    return res, (time.perf_counter() - start) * 1000


def _ids(docs: Sequence[Any]) -> list[str]:
    return [str(d.metadata.get("chunk_id", d.id)) for d in docs]


def _cited(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The sources the model itself cited (attributed-by-overlap ones are left out)."""
    return [s for s in res.get("sources", []) if not s.get("inferred")]


def score_record(query_id: str, question: str, res: dict[str, Any], ms: float, references: Sequence[str], *,
                 judge: AnswerJudge | None = None, key_facts: Sequence[Any] | None = None) -> AnswerRecord:
    """Score one chain output against its references (and key facts), judging it when a judge is given."""
    answer = str(res.get("answer", ""))
    docs = res.get("documents", [])
    cited = _cited(res)
    refs = list(references)
    ref = refs[0] if refs else None
    record = AnswerRecord(
        query_id, question, answer, ref, _ids(docs), None, None, ms, references=refs,
        cited_ids=[str(s.get("chunk_id")) for s in cited], supported=res.get("supported"),
    )
    if refs:
        record.em = exact_match(answer, refs)
        record.f1 = f1_score(answer, refs)
        record.cited_contains = contains_answer([str(s.get("text", "")) for s in cited], refs)
    if "model_answer" in res:
        record.model_answer = str(res["model_answer"])
        record.model_f1 = f1_score(record.model_answer, refs) if refs else None
    if key_facts is not None:
        record.key_facts = key_fact_hits(answer, key_facts)
    if judge is not None:
        record.correctness = judge.correctness(question, answer, ref)
        record.faithfulness = judge.faithfulness(answer, [d.page_content for d in docs])
    return record


def run_answer_eval(runner: EvalRunner, configs: Sequence[ExperimentConfig], llm: BaseChatModel, *, k: int = 4,
                    judge_llm: BaseChatModel | None = None, judge: bool = True,
                    answer_style: str = "full", reading_script: str = "auto",
                    gate: RelevanceGate | bool = False, stock: bool = False,
                    evidence: str | Sequence[str] = "default",
                    focus: int | Sequence[int] | None = None) -> list[AnswerResult]:
    """Answer every query of ``runner.dataset`` with the top ``k`` chunks of each config and score the answers.

    EM/F1/cited_contains are always computed for queries with reference answers; the LLM judge runs when ``judge``.
    ``answer_style="short"`` answers through `ExtractiveAnswer` (with ``reading_script``) for short-answer sets.
    Each config's chain is the ask chain (`ctxrag.chains.ask.build_ask_chain`) over the config's retriever (its top
    ``k``) with the evidence check ``evidence`` names (`EVIDENCE_CHECKS`; ``default`` is the product's, over the
    config's corpus source); several names answer each config once per check, in one run, the rows named
    ``CONFIG evidence=NAME``. ``focus``: the chain's ``answer_focus_chars`` (None: the setting's; 0: whole chunks);
    several answer each config and check once per length, the rows named ``CONFIG focus=N``. ``gate`` goes to it:
    off by default, as these sets are answerable by construction (the gate is measured on its own by
    bench/bench_answer_gate.py). ``stock`` adds a row for the stock LangChain chain (`ctxrag.evaluation.stock_chain`)
    over the same corpus, queries, ``k`` and model.
    """
    arms = evidence_arms(evidence)
    lengths = focus_arms(focus)
    grader = AnswerJudge(judge_llm or llm) if judge else None
    step = answer_step(llm, answer_style, reading_script)
    out: list[AnswerResult] = []
    ds = runner.dataset
    for cfg in configs:
        for length in lengths:
            for arm in arms:
                row = arm_config(cfg, arm, arms, length, lengths)
                try:
                    retriever, index_seconds = runner.build_retriever(cfg, k)
                    source = runner.source(cfg)
                    chain = build_ask_chain([source], llm, retriever=TopK(base=retriever, k=k), gate=gate,
                                            evidence=evidence_check(llm, source, arm), answer=step, focus=length)
                    result = _answer_all(runner, row, chain, grader, index_seconds)
                except (CtxragError, ValueError, ImportError) as e:
                    log.error("config %s failed: %s", row.name, e)
                    result = AnswerResult(config=row, dataset=ds.name, queries=0, error=str(e))
                result.evidence, result.focus = arm, length
                out.append(result)
    if stock:
        cfg = ExperimentConfig(name=STOCK_NAME, retrieval=SearchMode.BM25)
        try:
            start = time.perf_counter()
            chain = stock_answer_chain(ds.corpus, llm, k=k)
            out.append(_answer_all(runner, cfg, chain, grader, time.perf_counter() - start))
        except (ValueError, ImportError) as e:
            log.error("the stock LangChain chain failed: %s", e)
            out.append(AnswerResult(config=cfg, dataset=ds.name, queries=0, error=str(e)))
    return out


def _answer_all(runner: EvalRunner, cfg: ExperimentConfig, chain: Runnable[Any, Any], grader: AnswerJudge | None,
                index_seconds: float) -> AnswerResult:
    ds = runner.dataset
    records: list[AnswerRecord] = []
    for q in tqdm(ds.queries, desc=f"answers {cfg.name}", unit="q", disable=not runner.progress, leave=False):
        res, ms = answer_one(chain, q.text)
        records.append(score_record(q.id, q.text, res, ms, references_of(q), judge=grader))
    lat = np.asarray([r.answer_ms for r in records], dtype=float)
    return AnswerResult(
        config=cfg, dataset=ds.name, queries=len(records), metrics=answer_metrics(records),
        index_seconds=index_seconds, query_ms_p50=float(np.percentile(lat, 50)),
        query_ms_p95=float(np.percentile(lat, 95)), missing_gold=len(ds.missing_gold),
        dropped_queries=len(ds.dropped_queries), records=records)


# ---------------------------------------------------------------- key-fact sets (the demo questions)


@dataclass(frozen=True)
class KeyFactQuestion:
    """A question with its reference answer and the key facts a right answer states (each a string or a list of
    equivalent spellings)."""

    question: str
    answer: str
    key_facts: tuple[Any, ...]
    source: str | None = None


def load_key_fact_questions(path: str | Path) -> list[KeyFactQuestion]:
    """Read a JSON list of ``{"question", "answer", "key_facts": [...]}``; LoadError naming the item and field."""
    path = Path(path)
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LoadError(path, f"not a readable JSON file: {exc}") from None
    if not isinstance(items, list) or not items:
        raise LoadError(path, "expected a non-empty JSON list of questions")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
            raise LoadError(path, f"item {i}: needs a non-empty 'question' string")
        facts = item.get("key_facts")
        if not isinstance(facts, list) or not facts:
            raise LoadError(path, f"item {i} ({item['question'][:40]!r}): needs a non-empty 'key_facts' list")
        for fact in facts:
            ok = (isinstance(fact, str) and fact.strip()) or (
                isinstance(fact, list) and fact and all(isinstance(s, str) and s.strip() for s in fact))
            if not ok:
                raise LoadError(path, f"item {i}: key fact {fact!r} must be a string or a list of strings")
        out.append(KeyFactQuestion(item["question"], str(item.get("answer") or ""), tuple(facts), item.get("source")))
    return out


def run_key_fact_eval(chain: Runnable[Any, Any], questions: Sequence[KeyFactQuestion], *, name: str,
                      config: ExperimentConfig, judge: AnswerJudge | None = None,
                      progress: bool = False) -> AnswerResult:
    """Answer each question with ``chain`` (the ask chain, `build_ask_chain`, over the set's knowledge base) and check its key
    facts; the judge, when given, scores each answer against the reference answer beside them."""
    records = []
    for i, q in enumerate(tqdm(questions, desc=f"answers {name}", unit="q", disable=not progress, leave=False)):
        res, ms = answer_one(chain, q.question)
        records.append(score_record(str(i), q.question, res, ms, [], judge=judge, key_facts=q.key_facts))
        records[-1].reference = q.answer or None
    lat = np.asarray([r.answer_ms for r in records], dtype=float)
    return AnswerResult(config=config, dataset=name, queries=len(records), metrics=answer_metrics(records),
                        query_ms_p50=float(np.percentile(lat, 50)), query_ms_p95=float(np.percentile(lat, 95)),
                        records=records)


# ---------------------------------------------------------------- report


def _pct(m: dict[str, float], key: str) -> str:
    return f"{100 * m[key]:.1f}" if key in m else "—"


def format_answer_table(results: Sequence[AnswerResult]) -> str:
    """Markdown table: EM, F1 (and F1 of the model's own phrase where the answer is a source span) and
    cited-contains-answer in %, key facts (answers right / questions), judge 1-5 means
    (— when not judged) and seconds per answer (p50)."""
    head = ["configuration", "queries", "EM", "F1", "F1 model's phrase", "cited ⊇ answer", "key facts right", "judge 1-5",
            "faithfulness 1-5", "unparsed", "s/answer p50"]
    rows = []
    for r in results:
        if r.error:
            rows.append([r.config.name, "0", *["—"] * 8, f"error: {r.error[:80]}"])
            continue
        m = r.metrics
        facts = f"{int(m['answers_right'])}/{r.queries}" if "answers_right" in m else "—"
        judged = "answer_score_1to5" in m
        rows.append([
            r.config.name, str(r.queries), _pct(m, "em"), _pct(m, "f1"), _pct(m, "model_f1"), _pct(m, "cited_contains"),
            facts,
            f"{m['answer_score_1to5']:.2f}" if judged else "—", f"{m['faithfulness_1to5']:.2f}" if judged else "—",
            f"{int(m['judge_unparsed'])}" if judged else "—", f"{m.get('s_per_answer_p50', r.query_ms_p50 / 1000):.1f}",
        ])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(lines)
