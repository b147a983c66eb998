"""`ctxrag eval routing`: accuracy per scenario of the fast and LLM routers on the labelled routing set.

    ctxrag eval routing                         # both routers, real local model for the LLM one
    ctxrag eval routing --router fast --json routing.json
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ctxrag.errors import CtxragError
from ctxrag.settings import get_settings


def routing(
    router: str = typer.Option("both", "--router", help="fast | llm | both"),
    dataset: Optional[Path] = typer.Option(None, "--set", help="Routing set JSONL (default: the bundled one)."),
    corpus: Path = typer.Option(Path("examples/sample_corpus"), "--corpus", help="The sample corpus folder."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N questions."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write per-question results here."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write the table here."),
) -> None:
    """Route every labelled question with each router and print accuracy per scenario (1.1 ... 2.3)."""
    from ctxrag.evaluation.routing import build_routing_kbs, evaluate_router, format_table, load_routing_set
    from ctxrag.fileio import atomic_write_json

    kinds = {"both": ["fast", "llm"], "fast": ["fast"], "llm": ["llm"]}.get(router)
    try:
        if kinds is None:
            raise CtxragError(f"--router must be fast, llm or both, got {router!r}")
        items = load_routing_set(dataset)[:limit]
        kbs = build_routing_kbs(corpus, get_settings())
        llm = None
        if "llm" in kinds:
            from ctxrag.models.chat import make_chat_model

            llm = make_chat_model(get_settings(), max_tokens=64, temperature=0.0)
        reports = []
        for kind in kinds:
            typer.echo(f"routing {len(items)} questions with the {kind} router ...", err=True)
            reports.append(evaluate_router(kind, items, kbs, llm, progress=sys.stderr.isatty()))
        table = format_table(reports)
        typer.echo(table)
        if markdown:
            markdown.write_text(table + "\n", encoding="utf-8")
        if json_out:
            atomic_write_json(json_out, {"set": str(dataset or "bundled"), "n": len(items), "reports": reports})
            typer.echo(f"wrote {json_out}", err=True)
    except CtxragError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
