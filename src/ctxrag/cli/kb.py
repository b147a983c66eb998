"""`ctxrag kb ...` (list, show, check, repair, optimize, summarize, delete) and `ctxrag doc ...` (list, delete).

    ctxrag kb list | ctxrag kb show NAME | ctxrag kb check NAME | ctxrag doc list --kb NAME
"""
from __future__ import annotations

import json

import typer

from ctxrag.cli.common import guard, kb_or_default, open_kb
from ctxrag.cli.display import printable
from ctxrag.settings import get_settings

kb_app = typer.Typer(help="List, show, summarize and delete knowledge bases.", no_args_is_help=True)
doc_app = typer.Typer(help="List and delete documents of a knowledge base.", no_args_is_help=True)


@kb_app.command("list")
def kb_list() -> None:
    """Knowledge bases with their sizes."""
    from ctxrag.kb import KnowledgeBase

    def body() -> None:
        names = KnowledgeBase.list_names(get_settings())
        if not names:
            typer.echo("no knowledge bases yet; create one with `ctxrag ingest PATH --kb NAME`")
        for n in names:
            st = open_kb(n).stats()
            typer.echo(f"{n:20s} {st['documents']:6d} documents {st['chunks']:7d} chunks")

    guard(body)


@kb_app.command("show")
def kb_show(name: str = typer.Argument(...)) -> None:
    """Details of one knowledge base."""

    def body() -> None:
        st = open_kb(name).stats()
        typer.echo(json.dumps(st, indent=1))
        for index, n in st["indexes"].items():
            if n != st["chunks"]:
                typer.echo(f"warning: index {index!r} holds {n} chunks, the document store {st['chunks']}; "
                           f"run `ctxrag kb check {name}`", err=True)

    guard(body)


@kb_app.command("check")
def kb_check(name: str = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    """Compare the document store with every index by chunk id; list each difference; exit 1 unless clean."""

    def body() -> None:
        report = open_kb(name).check()
        if json_out:
            typer.echo(json.dumps({"kb": report.kb, "generation": report.generation, "chunks": report.chunks,
                                   "clean": report.clean, "counts": report.counts,
                                   "differences": [d.__dict__ for d in report.differences if not d.clean]}, indent=1))
        else:
            typer.echo("\n".join(report.lines()))
        if not report.clean:
            raise typer.Exit(1)

    guard(body)


@kb_app.command("repair")
def kb_repair(name: str = typer.Argument(...)) -> None:
    """Rebuild missing or damaged indexes from the stored chunk texts and commit them as a new generation."""

    def body() -> None:
        kbase = open_kb(name)
        typer.echo("\n".join(kbase.repair().lines()))
        after = kbase.check()
        if not after.clean:
            typer.echo("\n".join(after.lines()), err=True)
            raise typer.Exit(1)

    guard(body)


@kb_app.command("optimize")
def kb_optimize(name: str = typer.Argument(...)) -> None:
    """Merge the index segments small commits left into one per index (searches keep running meanwhile)."""

    def body() -> None:
        for index, (before, after) in open_kb(name).optimize().items():
            typer.echo(f"{index}: {before} segments -> {after}")

    guard(body)


@kb_app.command("summarize")
def kb_summarize(
    name: str = typer.Argument(...),
    force: bool = typer.Option(False, "--force", help="Rewrite summaries the model already wrote."),
    show: bool = typer.Option(False, "--show", help="Print every document's summary afterwards."),
) -> None:
    """Have the chat model write the 1-2 sentence document summaries the router and catalog use (extractive ones are
    the default); documents that already have one are skipped unless --force."""
    from ctxrag.kb.catalog import DocumentCatalog
    from ctxrag.models.chat import make_chat_model

    def body() -> None:
        kb = open_kb(name)
        catalog = DocumentCatalog(kb)
        written = catalog.refresh(make_chat_model(get_settings()), force=force, progress=True)
        typer.echo(f"wrote {written} summaries in knowledge base {name!r}")
        if show:
            for entry in catalog.entries():
                typer.echo(f"- {entry.title}: {entry.summary}")

    guard(body)


@kb_app.command("delete")
def kb_delete(name: str = typer.Argument(...), yes: bool = typer.Option(False, "--yes", "-y")) -> None:
    """Delete a knowledge base and everything in it."""
    from ctxrag.kb import KnowledgeBase

    def body() -> None:
        if not yes and not typer.confirm(f"delete knowledge base {name!r} and all its documents?"):
            raise typer.Exit(1)
        KnowledgeBase.delete_kb(name, get_settings())
        typer.echo(f"deleted knowledge base {name!r}")

    guard(body)


@doc_app.command("list")
def doc_list(kb: str = typer.Option(None, "--kb"), json_out: bool = typer.Option(False, "--json")) -> None:
    """Documents of a knowledge base."""

    def body() -> None:
        docs = open_kb(kb_or_default(kb)).list_documents()
        if json_out:
            typer.echo(json.dumps([{"doc_id": d.doc_id, "source": d.source, "title": d.title, "chunks": d.n_chunks}
                                   for d in docs], ensure_ascii=False, indent=1))
            return
        for d in docs:
            typer.echo(f"{d.doc_id}  {d.n_chunks:4d} chunks  {printable(d.source)}  ({printable(d.title)})")

    guard(body)


@doc_app.command("delete")
def doc_delete(doc: str = typer.Argument(..., help="Document id, source path or unique file name."),
               kb: str = typer.Option(None, "--kb")) -> None:
    """Delete a document from the store and every index."""

    def body() -> None:
        rec = open_kb(kb_or_default(kb)).delete_document(doc)
        typer.echo(f"deleted {printable(rec.source)} ({rec.doc_id}, {rec.n_chunks} chunks)")

    guard(body)
