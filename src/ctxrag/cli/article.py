"""`ctxrag article write`: draft a Markdown article from chosen notes (by ids, tag or query), streaming.

    ctxrag article write "混合检索" --tag retrieval --out article.md
    ctxrag article write "Support notes" --note 1 --note 3
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ctxrag.errors import CtxragError
from ctxrag.settings import get_settings

article_app = typer.Typer(help="Write articles from notes.", no_args_is_help=True)


def _check_out(out: Optional[Path]) -> None:
    """`--out` must name a file whose folder exists (`CtxragError` naming it otherwise)."""
    if out is None:
        return
    if out.is_dir():
        raise CtxragError(f"--out {out}: is a folder; give a file name, e.g. {out / 'article.md'}")
    if not out.parent.is_dir():
        raise CtxragError(f"--out {out}: the folder {out.parent} does not exist")


@article_app.command("write")
def write(
    topic: str = typer.Argument(..., help="Article title / topic."),
    note: Optional[list[int]] = typer.Option(None, "--note", help="Note id; repeat."),
    tag: Optional[str] = typer.Option(None, "--tag", help="Use the notes with this tag."),
    query: Optional[str] = typer.Option(None, "--query", help="Use the notes that best match this query."),
    k: int = typer.Option(8, "-k", min=1, help="At most this many notes for --query."),
    sections: int = typer.Option(4, "--sections", min=1),
    kb: Optional[str] = typer.Option(None, "--kb"),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the Markdown here."),
    json_out: bool = typer.Option(False, "--json", help="Print the final result as JSON."),
) -> None:
    """Outline -> sections citing notes -> Markdown with references."""
    from ctxrag.chains.article import ArticleWriter
    from ctxrag.cli.notes import _book
    from ctxrag.models.chat import make_chat_model, wrap_model_errors

    try:
        _check_out(out)  # before minutes of generation, not after
        book = _book(kb)
        chosen = book.select(ids=note, tag=tag, query=query, k=k)
        if not chosen:
            raise CtxragError("no notes matched; see `ctxrag notes list`")
        llm = make_chat_model(get_settings())
        writer = ArticleWriter(llm, max_sections=sections)
        final: dict[str, Any] = {}
        with wrap_model_errors(llm):
            for chunk in writer.stream(topic, chosen):
                if "outline" in chunk and not json_out:
                    typer.echo("outline: " + " | ".join(s["title"] for s in chunk["outline"]), err=True)
                elif "section" in chunk and not json_out:
                    typer.echo(f"\n## {chunk['section']}", err=True)
                elif "text" in chunk and not json_out:
                    typer.echo(chunk["text"], nl=False, err=True)
                elif "article" in chunk:
                    final = chunk
        if json_out:
            typer.echo(json.dumps(final, ensure_ascii=False, indent=1))
        else:
            typer.echo("\n")
            typer.echo(final["article"])
        if out:
            out.write_text(final["article"], encoding="utf-8")
            typer.echo(f"wrote {out}", err=True)
        if final.get("invalid_citations"):
            typer.echo(f"dropped citations to notes that do not exist: {final['invalid_citations']}", err=True)
    except (CtxragError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
