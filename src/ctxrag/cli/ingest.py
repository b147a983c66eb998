"""`ctxrag ingest` (files and folders, optionally contextualized) and `ctxrag import` (chunks with precomputed
vectors).

    ctxrag ingest docs/ notes.md --kb myproject --contextualize
    ctxrag import chunks.jsonl --kb big
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ctxrag.cli.common import guard, kb_or_default, open_kb
from ctxrag.cli.display import printable
from ctxrag.settings import get_settings

def ingest(
    paths: list[Path] = typer.Argument(..., help="Files or folders."),
    kb: str = typer.Option(None, "--kb", help="Knowledge base (default: the shared 'general' one)."),
    contextualize: bool = typer.Option(None, "--contextualize/--no-contextualize",
                                       help="Give chunks an LLM-written context (contextual retrieval; on by "
                                            "default, CTXRAG_CONTEXT_STRATEGY picks how)."),
    contexts: Optional[Path] = typer.Option(None, "--contexts", help="JSONL of precomputed chunk_id -> context."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Add or update files in a knowledge base; unchanged files are skipped."""
    def body() -> None:
        from ctxrag.kb import KnowledgeBase

        s = get_settings()
        name = kb_or_default(kb)
        is_new = name not in KnowledgeBase.list_names(s)
        kbase = open_kb(name, create=True)
        pre = None
        if contexts is not None:
            from ctxrag.indexing import load_precomputed_contexts

            pre = load_precomputed_contexts(contexts)
        report = kbase.ingest(paths, contextualize=contextualize, precomputed_contexts=pre)
        if is_new and not (report.added or report.updated or report.skipped) and not kbase.list_documents():
            kbase.close()  # nothing could be ingested: leave no empty knowledge base behind
            KnowledgeBase.delete_kb(name, s)
        if json_out:
            typer.echo(json.dumps({"kb": kbase.name, "files": [f.__dict__ for f in report.files],
                                   "context_report": getattr(report.context_report, "__dict__", None)},
                                  ensure_ascii=False, indent=1, default=str))
        else:
            for f in report.files:
                extra = f" ({f.chunks} chunks)" if f.status in ("added", "updated") else ""
                reason = f": {f.reason}" if f.reason else ""
                typer.echo(f"{f.status:8s} {printable(f.path)}{extra}{printable(reason)}")
            typer.echo(f"{len(report.added)} added, {len(report.updated)} updated, {len(report.skipped)} skipped, "
                       f"{len(report.failed)} failed -> knowledge base {kbase.name!r}")
            if report.context_report is not None:
                typer.echo(f"contexts: {report.context_report}")
            if is_new and name not in KnowledgeBase.list_names(s):
                typer.echo(f"knowledge base {name!r} not created: no file could be ingested", err=True)
        if report.failed:
            raise typer.Exit(1)

    guard(body)


def import_chunks(
    file: Path = typer.Argument(..., help="JSONL (or Parquet) of chunks: text, vector, optional source/title/metadata."),
    kb: str = typer.Option(None, "--kb", help="Knowledge base (default: the shared 'general' one)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="jsonl or parquet (default: from the file suffix)."),
    batch_size: int = typer.Option(10_000, "--batch-size", help="Chunks handed to the indexes per step."),
    max_errors: int = typer.Option(20, "--max-errors", help="Stop reading after naming this many bad records."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Import chunks with precomputed vectors (no embedding model runs); all or nothing. See docs/scale.md."""
    from ctxrag.indexing.bulk_import import kb_dimension, read_precomputed

    def body() -> None:
        s = get_settings()
        kbase = open_kb(kb_or_default(kb), create=True)
        batches = read_precomputed(file, kbase.name, dim=kb_dimension(kbase.dense_index(), kbase.settings), fmt=fmt,
                                   batch_size=batch_size, max_errors=max_errors, progress=True)
        report = kbase.import_precomputed(batches)
        chunks = sum(f.chunks for f in report.added + report.updated)
        summary = {"kb": kbase.name, "file": str(file), "added": len(report.added), "updated": len(report.updated),
                   "skipped": len(report.skipped), "chunks": chunks, "generation": kbase.generation}
        if json_out:
            typer.echo(json.dumps(summary, ensure_ascii=False))
        else:
            typer.echo(f"{summary['added']} added, {summary['updated']} updated, {summary['skipped']} skipped documents "
                       f"({chunks} chunks) -> knowledge base {kbase.name!r}, generation {summary['generation']}")

    guard(body)
