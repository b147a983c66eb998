"""`ctxrag eval`: retrieval metrics and answer quality of several configurations on one dataset, in one run.

    ctxrag eval retrieval --format anthropic ../shared/data/contextual-retrieval          # the six default configs
    ctxrag eval retrieval --format beir data/scifact --config dense --config hybrid -k 5,10 --json out.json
    ctxrag eval answers --format squad ../shared/data/chinese/DRCD_dev.json --sample 200 --answer-style short
    ctxrag eval answers --format keyfacts examples/sample_corpus --questions examples/sample_questions.json
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ctxrag.errors import CtxragError
from ctxrag.settings import get_settings

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel

    from ctxrag.evaluation.answers import AnswerResult

eval_app = typer.Typer(help="Evaluate retrieval and answer quality on benchmark datasets.", no_args_is_help=True)

FORMAT_HELP = "Dataset layout: anthropic | squad | beir | musique."
CONFIG_HELP = ("Built-in name (dense, bm25, hybrid, hybrid-rerank-llm, hybrid-rerank-jina, graph, contextual-NAME) or "
               "a YAML file; repeat to compare several. Default for --format anthropic: dense, bm25, hybrid and their "
               "contextual variants; otherwise dense, bm25, hybrid.")


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(1)


def _prepare(fmt: str, paths: list[Path], configs: Optional[list[str]], contexts: Optional[Path], ks: str,
             sample: Optional[int], seed: int, split: str) -> tuple[Any, list[Any], list[int]]:
    from ctxrag.evaluation.datasets import anthropic_contexts_file, load_dataset
    from ctxrag.evaluation.experiments import ANTHROPIC_DEFAULTS, resolve_configs
    from ctxrag.evaluation.metrics import parse_ks

    fmt = fmt.strip().lower()
    kw: dict[str, Any] = {}
    if fmt == "anthropic":
        # the folder's own contexts back the contextual configs; --contexts overrides them
        kw["contexts"] = contexts or (anthropic_contexts_file(paths[0]) if paths else None)
    if fmt == "beir":
        kw["split"] = split
    dataset = load_dataset(fmt, paths, **kw).sample(sample, seed)
    specs: list[Any] = list(configs) if configs else list(ANTHROPIC_DEFAULTS if fmt == "anthropic" else
                                                          ("dense", "bm25", "hybrid"))
    # --contexts makes every named config contextual; with the anthropic defaults it only replaces the folder's file
    ctx_override = contexts if (contexts is not None and (configs or fmt != "anthropic")) else None
    try:
        k_list = parse_ks(ks)
    except ValueError as e:
        raise CtxragError(str(e)) from None
    return dataset, resolve_configs(specs, ctx_override), k_list


def _summary(dataset: Any) -> str:
    extra = ""
    if dataset.missing_gold:
        extra = (f"; {len(dataset.missing_gold)} gold ids not in the corpus (reported, not scored), "
                 f"{len(dataset.dropped_queries)} queries without gold skipped")
    return f"dataset {dataset.name}: {len(dataset.corpus)} corpus items, {len(dataset.queries)} queries{extra}"


@eval_app.command("retrieval")
def retrieval(
    paths: list[Path] = typer.Argument(..., help="Dataset folder (or SQuAD files)."),
    fmt: str = typer.Option(..., "--format", "-f", help=FORMAT_HELP),
    config: Optional[list[str]] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    contexts: Optional[Path] = typer.Option(None, "--contexts", help="JSONL of chunk_id -> context: makes every "
                                            "config contextual (anthropic: replaces the folder's contexts file)."),
    ks: str = typer.Option("5,10,20", "-k", "--k", help="Cut-offs, comma-separated."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write the results as JSON here."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write metric@k curves and a bar chart (PNG) here."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write the printed table to this file."),
    sample: Optional[int] = typer.Option(None, "--sample", min=1, help="Evaluate N random queries (corpus unchanged)."),
    seed: int = typer.Option(0, "--seed"),
    split: str = typer.Option("test", "--split", help="BEIR qrels split."),
    per_query: bool = typer.Option(False, "--per-query", help="Include per-query rankings in the JSON."),
    no_references: bool = typer.Option(False, "--no-references", help="Do not print the published reference rows."),
) -> None:
    """Retrieval metrics (Pass@k = Recall@k, hit rate, MRR, nDCG) of each configuration, with one table."""
    from ctxrag.evaluation.report import format_table, plot_results, references_for, write_json
    from ctxrag.evaluation.runner import EvalRunner

    try:
        dataset, configs, k_list = _prepare(fmt, paths, config, contexts, ks, sample, seed, split)
        typer.echo(_summary(dataset), err=True)
        runner = EvalRunner(dataset, k_list, settings=get_settings(), progress=sys.stderr.isatty())
        results = []
        for cfg in configs:
            typer.echo(f"running {cfg.name} ...", err=True)
            results.extend(runner.run_all([cfg]))
        refs = () if no_references else references_for(fmt.strip().lower())
        table = format_table(results, k_list, refs)
        typer.echo(table)
        if markdown:
            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(table + "\n", encoding="utf-8")
        if json_out:
            write_json(results, json_out, per_query=per_query, dataset=dataset.name, format=fmt, k=k_list,
                       paths=[str(p) for p in paths], sample=sample, seed=seed,
                       missing_gold=[list(p) for p in dataset.missing_gold])
            typer.echo(f"wrote {json_out}", err=True)
        if plot:
            plot_results(results, plot, k_list, refs, title=f"{dataset.name}: {len(dataset.queries)} queries")
            typer.echo(f"wrote {plot}", err=True)
    except CtxragError as e:
        _fail(str(e))
    failed = [r for r in results if r.error]
    for r in failed:
        typer.echo(f"error: config {r.config.name}: {r.error}", err=True)
    if failed:
        raise typer.Exit(1)


KEYFACTS = "keyfacts"


@eval_app.command("answers")
def answers(
    paths: list[Path] = typer.Argument(..., help="Dataset folder (or SQuAD files); for --format keyfacts the folder "
                                       "of documents to ingest."),
    fmt: str = typer.Option(..., "--format", "-f", help=FORMAT_HELP + " Or keyfacts: a document folder plus "
                            "--questions (the demo set: examples/sample_corpus + examples/sample_questions.json)."),
    config: Optional[list[str]] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    contexts: Optional[Path] = typer.Option(None, "--contexts", help="JSONL of chunk_id -> context."),
    k: int = typer.Option(4, "-k", "--k", min=1, help="Chunks given to the model."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write results (with answers and reasons) here."),
    sample: Optional[int] = typer.Option(10, "--sample", min=1, help="Queries to answer, drawn with --seed "
                                         "(LLM time adds up)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Answer only the first N queries of the "
                                        "sample (a fixed prefix of the same seeded sample)."),
    seed: int = typer.Option(0, "--seed"),
    split: str = typer.Option("test", "--split"),
    answer_style: str = typer.Option("full", "--answer-style", help="full: the normal cited answer; short: the "
                                     "answer phrase alone, as its source span plus [n] (the chain's optional "
                                     "ExtractiveAnswer step; for EM/F1 on short-answer sets)."),
    reading_script: str = typer.Option("auto", "--reading-script", help="simplified: the model reads a Traditional "
                                       "Chinese question and its chunks in Simplified script (short answers; still "
                                       "snapped to the Traditional source); as-written: never converted; auto: "
                                       "simplified for short answers."),
    stock: Optional[bool] = typer.Option(None, "--stock/--no-stock", help="Also answer with a stock LangChain chain "
                                         "(BM25Retriever with jieba and stopwords -> the same model -> a plain "
                                         "answer-phrase prompt) in the same run (default: on for --answer-style "
                                         "short on short-answer sets)."),
    judge: Optional[bool] = typer.Option(None, "--judge/--no-judge", help="Also score answers with the LLM judge "
                                         "(default: on for keyfacts, off for short-answer sets)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Answer length cap (default: "
                                             "llm.max_tokens)."),
    questions: Optional[Path] = typer.Option(None, "--questions", help="keyfacts: JSON list of {question, answer, "
                                             "key_facts}."),
    kb: str = typer.Option("eval-keyfacts", "--kb", help="keyfacts: knowledge base to ingest the folder into."),
    evidence: Optional[list[str]] = typer.Option(None, "--evidence", help="The chain's evidence check: default, "
                                                 "the product's (key-term stages over the knowledge base's BM25, as "
                                                 "`ctxrag ask`); plain, without key terms (the answer pages' rows "
                                                 "before 2026-11-29); off. Repeat to answer with each in one run."),
    focus: Optional[list[int]] = typer.Option(None, "--focus", min=0, help="answer_focus_chars of the chain: each "
                                              "long chunk given to the model as its sentences near the question, up "
                                              "to this many characters (0: whole chunks; default: the setting). "
                                              "Repeat to answer with each in one run."),
) -> None:
    """End-to-end answer accuracy through the RAG chain: EM/F1 and cited-chunk checks on short-answer sets, key facts
    on the demo set, the LLM judge beside them; seconds per answer (p50)."""
    from ctxrag.evaluation.answers import format_answer_table, run_answer_eval
    from ctxrag.evaluation.report import write_json
    from ctxrag.evaluation.runner import EvalRunner
    from ctxrag.models.chat import make_chat_model

    results: list[Any] = []
    try:
        from ctxrag.chains.short_answer import READING_SCRIPTS
        from ctxrag.evaluation.answers import ANSWER_STYLES, EVIDENCE_CHECKS

        if answer_style not in ANSWER_STYLES:
            raise CtxragError(f"--answer-style {answer_style!r}: choose {' or '.join(ANSWER_STYLES)}")
        if reading_script not in READING_SCRIPTS:
            raise CtxragError(f"--reading-script {reading_script!r}: choose {', '.join(READING_SCRIPTS)}")
        if reading_script == "simplified" and answer_style != "short":
            raise CtxragError("--reading-script simplified needs --answer-style short")
        arms = list(dict.fromkeys(evidence or ["default"]))
        bad = [a for a in arms if a not in EVIDENCE_CHECKS]
        if bad:
            raise CtxragError(f"--evidence {bad[0]!r}: choose {', '.join(EVIDENCE_CHECKS)}")
        overrides: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens else {}
        llm = make_chat_model(**overrides)
        if fmt.strip().lower() == KEYFACTS:
            lengths: list[int | None] = list(focus) if focus else [None]  # None: the setting's
            results = _key_facts(paths, questions, kb, k, llm, answer_style, judge is not False, arms, lengths)
            dataset_name = results[0].dataset
        else:
            dataset, configs, _ = _prepare(fmt, paths, config or ["hybrid"], contexts, "5", sample, seed, split)
            if limit is not None and limit < len(dataset.queries):
                dataset = replace(dataset, queries=dataset.queries[:limit])
            typer.echo(_summary(dataset), err=True)
            results = run_answer_eval(EvalRunner(dataset, [k], settings=get_settings(), progress=sys.stderr.isatty()), configs, llm, k=k,
                                      judge=bool(judge), answer_style=answer_style, reading_script=reading_script,
                                      stock=answer_style == "short" if stock is None else stock, evidence=arms,
                                      focus=focus or None)
            dataset_name = dataset.name
        typer.echo(format_answer_table(results))
        if json_out:
            write_json(results, json_out, per_query=True, dataset=dataset_name, format=fmt, k=k, sample=sample,
                       limit=limit, seed=seed, answer_style=answer_style, reading_script=reading_script,
                       evidence=arms, focus=focus or None, model=getattr(llm, "model_name", None))
            typer.echo(f"wrote {json_out}", err=True)
    except CtxragError as e:
        _fail(str(e))
    if any(r.error for r in results):
        for r in results:
            if r.error:
                typer.echo(f"error: config {r.config.name}: {r.error}", err=True)
        raise typer.Exit(1)


def _key_facts(paths: list[Path], questions: Optional[Path], kb_name: str, k: int, llm: BaseChatModel,
               answer_style: str, judge: bool, evidence: list[str],
               focus: list[int | None]) -> list[AnswerResult]:
    """Ingest the folder into ``kb_name`` and answer the key-fact questions through the demo's chain, once per
    evidence check in ``evidence`` (`ctxrag.evaluation.answers.EVIDENCE_CHECKS`) and answer_focus_chars in ``focus``
    (None: the setting's)."""
    from ctxrag.chains.ask import build_ask_chain
    from ctxrag.enums import SearchMode
    from ctxrag.evaluation.answers import (
        answer_step,
        arm_config,
        evidence_check,
        load_key_fact_questions,
        run_key_fact_eval,
    )
    from ctxrag.evaluation.experiments import builtin
    from ctxrag.evaluation.judge import AnswerJudge
    from ctxrag.kb import KnowledgeBase

    if len(paths) != 1 or not paths[0].is_dir():
        raise CtxragError(f"--format keyfacts takes one folder of documents, got {[str(p) for p in paths]}")
    if questions is None:
        raise CtxragError("--format keyfacts needs --questions FILE (e.g. examples/sample_questions.json)")
    items = load_key_fact_questions(questions)
    kbase = KnowledgeBase.open(kb_name, get_settings(), create=True)
    report = kbase.ingest([paths[0]], contextualize=False)  # as `ctxrag demo` ingests
    typer.echo(f"ingested {paths[0]} into {kb_name!r}: {len(report.added)} added, {len(report.updated)} updated, "
               f"{len(report.skipped)} skipped, {len(report.failed)} failed", err=True)
    out = []
    for length in focus:
        for arm in evidence:
            # the demo's chain with the gate off (these questions are answerable), the evidence check named
            chain = build_ask_chain([kbase], llm, k=k, mode=SearchMode.HYBRID, gate=False,
                                    evidence=evidence_check(llm, kbase, arm), answer=answer_step(llm, answer_style),
                                    focus=length)
            result = run_key_fact_eval(chain, items, name=f"keyfacts:{questions.name}",
                                       config=arm_config(builtin("hybrid"), arm, evidence, length, focus),
                                       judge=AnswerJudge(llm) if judge else None, progress=sys.stderr.isatty())
            result.evidence, result.focus = arm, length
            out.append(result)
    return out


eval_app.command("routing")(__import__("ctxrag.cli.routing_eval", fromlist=["routing"]).routing)
