"""`ctxrag eval`: retrieval metrics and answer quality of several configurations on one dataset, in one run.

    ctxrag eval retrieval --format anthropic ../shared/data/contextual-retrieval          # the six default configs
    ctxrag eval retrieval --format beir data/scifact --config dense --config hybrid -k 5,10 --json out.json
    ctxrag eval answers --format squad cmrc_dev.json --config hybrid --sample 20
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from ctxrag.errors import CtxragError

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
        runner = EvalRunner(dataset, k_list, progress=sys.stderr.isatty())
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


@eval_app.command("answers")
def answers(
    paths: list[Path] = typer.Argument(..., help="Dataset folder (or SQuAD files)."),
    fmt: str = typer.Option(..., "--format", "-f", help=FORMAT_HELP),
    config: Optional[list[str]] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    contexts: Optional[Path] = typer.Option(None, "--contexts", help="JSONL of chunk_id -> context."),
    k: int = typer.Option(4, "-k", "--k", min=1, help="Chunks given to the model."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write results (with answers and reasons) here."),
    sample: Optional[int] = typer.Option(10, "--sample", min=1, help="Queries to answer (LLM time adds up)."),
    seed: int = typer.Option(0, "--seed"),
    split: str = typer.Option("test", "--split"),
) -> None:
    """Answer quality (LLM judge 1-5 against the reference) and faithfulness to the retrieved context."""
    from ctxrag.evaluation.answers import format_answer_table, run_answer_eval
    from ctxrag.evaluation.report import write_json
    from ctxrag.evaluation.runner import EvalRunner
    from ctxrag.models.chat import make_chat_model

    try:
        dataset, configs, _ = _prepare(fmt, paths, config or ["hybrid"], contexts, "5", sample, seed, split)
        typer.echo(_summary(dataset), err=True)
        llm = make_chat_model()
        results = run_answer_eval(EvalRunner(dataset, [k], progress=sys.stderr.isatty()), configs, llm, k=k)
        typer.echo(format_answer_table(results))
        if json_out:
            write_json(results, json_out, per_query=True, dataset=dataset.name, format=fmt, k=k, sample=sample, seed=seed)
            typer.echo(f"wrote {json_out}", err=True)
    except CtxragError as e:
        _fail(str(e))
    if any(r.error for r in results):
        for r in results:
            if r.error:
                typer.echo(f"error: config {r.config.name}: {r.error}", err=True)
        raise typer.Exit(1)


eval_app.command("routing")(__import__("ctxrag.cli.routing_eval", fromlist=["routing"]).routing)
