"""The `ctxrag` command line: ingest, search, ask, manage knowledge bases and documents, evaluate, serve."""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from ctxrag.cli.display import printable
from ctxrag.errors import CtxragError

app = typer.Typer(help="ctxrag: contextual RAG over Chinese and English knowledge bases, offline by default.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
kb_app = typer.Typer(help="List, show, summarize and delete knowledge bases.", no_args_is_help=True)
doc_app = typer.Typer(help="List and delete documents of a knowledge base.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")
app.add_typer(doc_app, name="doc")

_STATE: dict[str, Any] = {"debug": False}


def _err(msg: str, code: int = 1) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


@app.callback()
def main(
    debug: bool = typer.Option(False, "--debug", help="Log every stage with full texts to stderr."),
    home: Optional[Path] = typer.Option(None, "--home", help="Data folder (default $CTXRAG_HOME or ~/.ctxrag)."),
) -> None:
    if home is not None:
        os.environ["CTXRAG_HOME"] = str(home)
    from ctxrag.settings import get_settings

    get_settings.cache_clear()
    _STATE["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s", force=True)
    if debug:
        for noisy in ("httpx", "httpcore", "openai", "urllib3", "jieba", "faiss"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _callbacks() -> list:
    if not _STATE["debug"]:
        return []
    from ctxrag.debug import DebugLogHandler

    return [DebugLogHandler()]


def _open(name: str, create: bool = False) -> Any:
    from ctxrag.knowledge_base import KnowledgeBase

    return KnowledgeBase.open(name, create=create)


def _kb_or_default(kb: Optional[str]) -> str:
    """`--kb` as given (an empty one is an error, not the default), or the default knowledge base."""
    from ctxrag.knowledge_base import validate_kb_name
    from ctxrag.settings import get_settings

    return get_settings().default_kb if kb is None else validate_kb_name(kb)


def _query(text: str, what: str) -> str:
    from ctxrag.settings import get_settings
    from ctxrag.text import check_query

    return check_query(text, get_settings().max_query_chars, what=what)


def _guard(fn: Any) -> Any:
    """Run a command body, turning expected failures into a one-line error and exit code 1."""
    try:
        return fn()
    except typer.Exit:
        raise
    except CtxragError as e:
        _err(str(e))
    except sqlite3.DatabaseError as e:  # a store damaged past what opening it checks
        _err(f"a SQLite database is damaged or busy ({e}); see `ctxrag kb check NAME`")


@app.command()
def ingest(
    paths: list[Path] = typer.Argument(..., help="Files or folders."),
    kb: str = typer.Option(None, "--kb", help="Knowledge base (default: the shared 'general' one)."),
    contextualize: bool = typer.Option(None, "--contextualize/--no-contextualize",
                                       help="Write an LLM context for each chunk (contextual retrieval)."),
    contexts: Optional[Path] = typer.Option(None, "--contexts", help="JSONL of precomputed chunk_id -> context."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Add or update files in a knowledge base; unchanged files are skipped."""
    from ctxrag.settings import get_settings

    def body() -> None:
        from ctxrag.knowledge_base import KnowledgeBase

        s = get_settings()
        name = _kb_or_default(kb)
        is_new = name not in KnowledgeBase.list_names(s)
        kbase = _open(name, create=True)
        ctx = None
        pre = None
        if contexts is not None:
            from ctxrag.indexing import load_precomputed_contexts

            pre = load_precomputed_contexts(contexts)
        elif contextualize if contextualize is not None else s.contextualize:
            from ctxrag.indexing.strategies import make_contextualizer

            ctx = make_contextualizer(s.context_strategy, settings=s, show_progress=True)
        report = kbase.ingest(paths, contextualizer=ctx, precomputed_contexts=pre)
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

    _guard(body)


@app.command("import")
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
    from ctxrag.settings import get_settings

    def body() -> None:
        s = get_settings()
        kbase = _open(kb or s.default_kb, create=True)
        batches = read_precomputed(file, kbase.name, dim=kb_dimension(kbase.dense, kbase.settings), fmt=fmt,
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

    _guard(body)


def _retriever(kbs: list[str], mode: str, k: int, rerank: str, search_type: str) -> Any:
    from ctxrag.retrievers.factory import make_multi_kb_retriever

    opened = [_open(n) for n in kbs]
    return make_multi_kb_retriever(opened, mode=mode, k=k, rerank=rerank, search_type=search_type)


def _kb_names(kb: Optional[list[str]]) -> list[str]:
    from ctxrag.settings import get_settings

    return kb or [get_settings().default_kb]


@app.command()
def search(
    query: str = typer.Argument(...),
    kb: Optional[list[str]] = typer.Option(None, "--kb", help="Knowledge base(s); repeat to search several."),
    k: int = typer.Option(10, "-k", "--k", min=1),
    mode: str = typer.Option("hybrid", "--mode", help="dense | bm25 | hybrid | graph"),
    rerank: str = typer.Option("none", "--rerank", help="none | jina | llm"),
    search_type: str = typer.Option("similarity", "--search-type", help="similarity | mmr (dense side)"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Ranked chunks with score, source, chunk id and the full chunk text."""

    def body() -> None:
        checked = _query(query, "query")
        retriever = _retriever(_kb_names(kb), mode, k, rerank, search_type)
        docs = retriever.invoke(checked, config={"callbacks": _callbacks()})
        if json_out:
            typer.echo(json.dumps([{"rank": i, "chunk_id": d.metadata.get("chunk_id"), "score": d.metadata.get("score"),
                                    "source": d.metadata.get("source"), "kb": d.metadata.get("kb"),
                                    "heading_path": d.metadata.get("heading_path"), "text": d.page_content}
                                   for i, d in enumerate(docs, 1)], ensure_ascii=False, indent=1))
            return
        if not docs:
            typer.echo("no results")
        for i, d in enumerate(docs, 1):
            md = d.metadata
            score = md.get("score")
            source = printable(md.get("source"))
            typer.echo(f"#{i}  score={score:.4f}  {source}  [{md.get('chunk_id')}]"
                       if isinstance(score, float) else f"#{i}  {source}  [{md.get('chunk_id')}]")
            if md.get("heading_path"):
                typer.echo(f"    {printable(md['heading_path'])}")
            typer.echo(d.page_content)
            typer.echo("")

    _guard(body)


@app.command()
def ask(
    question: str = typer.Argument(...),
    kb: Optional[list[str]] = typer.Option(None, "--kb", help="Knowledge base(s); repeat to use several."),
    k: int = typer.Option(4, "-k", "--k", min=1, help="Chunks given to the model."),
    mode: str = typer.Option("hybrid", "--mode"),
    rerank: str = typer.Option("none", "--rerank"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Answer a question from the knowledge base with [n] citations; streams to the terminal."""
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.models.chat import make_chat_model, wrap_model_errors

    def body() -> None:
        checked = _query(question, "question")
        llm = make_chat_model()
        chain = build_rag_chain(_retriever(_kb_names(kb), mode, k, rerank, "similarity"), llm)
        cfg = {"callbacks": _callbacks()}
        if json_out:
            with wrap_model_errors(llm):
                out = chain.invoke(checked, config=cfg)
            typer.echo(json.dumps({"question": question, "answer": out["answer"], "sources": out["sources"],
                                   "invalid_citations": out["invalid_citations"],
                                   "retrieved": [d.metadata.get("chunk_id") for d in out["documents"]]},
                                  ensure_ascii=False, indent=1))
            return
        stream_answer(chain, llm, checked, cfg)

    _guard(body)


def stream_answer(chain: Any, llm: Any, question: str, config: dict[str, Any]) -> dict[str, Any]:
    """Print the answer as the model writes it, then its sources; returns the non-answer fields."""
    from ctxrag.models.chat import wrap_model_errors

    final: dict[str, Any] = {}
    with wrap_model_errors(llm):
        for chunk in chain.stream(question, config=config):
            if "answer" in chunk:
                typer.echo(chunk["answer"], nl=False)
            final.update({k: v for k, v in chunk.items() if k != "answer"})
    typer.echo("")
    print_sources(final.get("sources", []), final.get("invalid_citations", []))
    return final


def print_sources(sources: list[dict[str, Any]], invalid: list[int]) -> None:
    if sources:
        inferred = all(s.get("inferred") for s in sources)
        typer.echo("\nSources (inferred from overlap; the model cited none):" if inferred else "\nSources:")
        for s in sources:
            where = f" > {s['heading_path']}" if s.get("heading_path") else ""
            typer.echo(f"  [{s['n']}] {printable(s['source'])}{printable(where)}  ({s['chunk_id']})")
    else:
        typer.echo("\n(no sources cited)")
    if invalid:
        typer.echo(f"  (the model cited sources that do not exist: {invalid})")


@kb_app.command("list")
def kb_list() -> None:
    """Knowledge bases with their sizes."""
    from ctxrag.knowledge_base import KnowledgeBase

    def body() -> None:
        names = KnowledgeBase.list_names()
        if not names:
            typer.echo("no knowledge bases yet; create one with `ctxrag ingest PATH --kb NAME`")
        for n in names:
            st = _open(n).stats()
            typer.echo(f"{n:20s} {st['documents']:6d} documents {st['chunks']:7d} chunks")

    _guard(body)


@kb_app.command("show")
def kb_show(name: str = typer.Argument(...)) -> None:
    """Details of one knowledge base."""

    def body() -> None:
        st = _open(name).stats()
        typer.echo(json.dumps(st, indent=1))
        for index, n in st["indexes"].items():
            if n != st["chunks"]:
                typer.echo(f"warning: index {index!r} holds {n} chunks, the document store {st['chunks']}; "
                           f"run `ctxrag kb check {name}`", err=True)

    _guard(body)


@kb_app.command("check")
def kb_check(name: str = typer.Argument(...), json_out: bool = typer.Option(False, "--json")) -> None:
    """Compare the document store with every index by chunk id; list each difference; exit 1 unless clean."""
    from ctxrag.kb_maintenance import check

    def body() -> None:
        report = check(_open(name))
        if json_out:
            typer.echo(json.dumps({"kb": report.kb, "generation": report.generation, "chunks": report.chunks,
                                   "clean": report.clean, "counts": report.counts,
                                   "differences": [d.__dict__ for d in report.differences if not d.clean]}, indent=1))
        else:
            typer.echo("\n".join(report.lines()))
        if not report.clean:
            raise typer.Exit(1)

    _guard(body)


@kb_app.command("repair")
def kb_repair(name: str = typer.Argument(...)) -> None:
    """Rebuild missing or damaged indexes from the stored chunk texts and commit them as a new generation."""
    from ctxrag.kb_maintenance import check, repair

    def body() -> None:
        kbase = _open(name)
        typer.echo("\n".join(repair(kbase).lines()))
        after = check(kbase)
        if not after.clean:
            typer.echo("\n".join(after.lines()), err=True)
            raise typer.Exit(1)

    _guard(body)


@kb_app.command("summarize")
def kb_summarize(
    name: str = typer.Argument(...),
    force: bool = typer.Option(False, "--force", help="Rewrite summaries the model already wrote."),
    show: bool = typer.Option(False, "--show", help="Print every document's summary afterwards."),
) -> None:
    """Have the chat model write the 1-2 sentence document summaries the router and catalog use (extractive ones are
    the default); documents that already have one are skipped unless --force."""
    from ctxrag.catalog import DocumentCatalog
    from ctxrag.models.chat import make_chat_model

    def body() -> None:
        kb = _open(name)
        catalog = DocumentCatalog(kb)
        written = catalog.refresh(make_chat_model(), force=force, progress=True)
        typer.echo(f"wrote {written} summaries in knowledge base {name!r}")
        if show:
            for entry in catalog.entries():
                typer.echo(f"- {entry.title}: {entry.summary}")

    _guard(body)


@kb_app.command("delete")
def kb_delete(name: str = typer.Argument(...), yes: bool = typer.Option(False, "--yes", "-y")) -> None:
    """Delete a knowledge base and everything in it."""
    from ctxrag.knowledge_base import KnowledgeBase

    def body() -> None:
        if not yes and not typer.confirm(f"delete knowledge base {name!r} and all its documents?"):
            raise typer.Exit(1)
        KnowledgeBase.delete_kb(name)
        typer.echo(f"deleted knowledge base {name!r}")

    _guard(body)


@doc_app.command("list")
def doc_list(kb: str = typer.Option(None, "--kb"), json_out: bool = typer.Option(False, "--json")) -> None:
    """Documents of a knowledge base."""

    def body() -> None:
        docs = _open(_kb_or_default(kb)).list_documents()
        if json_out:
            typer.echo(json.dumps([{"doc_id": d.doc_id, "source": d.source, "title": d.title, "chunks": d.n_chunks}
                                   for d in docs], ensure_ascii=False, indent=1))
            return
        for d in docs:
            typer.echo(f"{d.doc_id}  {d.n_chunks:4d} chunks  {printable(d.source)}  ({printable(d.title)})")

    _guard(body)


@doc_app.command("delete")
def doc_delete(doc: str = typer.Argument(..., help="Document id, source path or unique file name."),
               kb: str = typer.Option(None, "--kb")) -> None:
    """Delete a document from the store and every index."""

    def body() -> None:
        rec = _open(_kb_or_default(kb)).delete_document(doc)
        typer.echo(f"deleted {printable(rec.source)} ({rec.doc_id}, {rec.n_chunks} chunks)")

    _guard(body)


@app.command()
def demo(
    corpus: Path = typer.Option(Path("examples/sample_corpus"), help="Folder to ingest."),
    questions: Path = typer.Option(Path("examples/sample_questions.json"), help="JSON list of questions."),
    kb: str = typer.Option("demo", "--kb"),
) -> None:
    """Ingest the sample corpus and answer its questions with cited sources (the embedded offline default)."""
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.models.chat import make_chat_model, wrap_model_errors

    def body() -> None:
        kbase = _open(kb, create=True)
        report = kbase.ingest([corpus])
        typer.echo(f"ingested {corpus}: {len(report.added)} added, {len(report.updated)} updated, "
                   f"{len(report.skipped)} skipped, {len(report.failed)} failed")
        for f in report.failed:
            typer.echo(f"  failed {f.path}: {f.reason}")
        items = json.loads(questions.read_text(encoding="utf-8"))
        llm = make_chat_model()
        typer.echo(f"answering with {describe_model(llm)}")
        chain = build_rag_chain(kbase.as_retriever(mode="hybrid", k=4), llm)
        for item in items:
            q = item["question"] if isinstance(item, dict) else str(item)
            typer.echo(f"\nQ: {q}\nA: ", nl=False)
            stream_answer(chain, llm, q, {"callbacks": _callbacks()})

    _guard(body)


def describe_model(llm: Any) -> str:
    """One line naming the chat model for the demo: the local GGUF (and how to switch) or the endpoint's model."""
    path = getattr(llm, "model_path", None)
    if path:
        return (f"the local model {getattr(llm, 'model_name', '') or Path(path).stem} (in-process llama.cpp; "
                "CTXRAG_LLM__LOCAL_MODEL=0.5b picks the faster, weaker 0.5B)")
    return f"{getattr(llm, 'model_name', None) or getattr(llm, 'model', '?')} at {getattr(llm, 'openai_api_base', '?')}"


def _mount_optional() -> None:
    """Sub-apps that live in their own modules."""
    for mod, attr, name in (("ctxrag.cli.eval", "eval_app", "eval"), ("ctxrag.cli.notes", "notes_app", "notes"),
                            ("ctxrag.cli.article", "article_app", "article"), ("ctxrag.cli.assistant", "chat", "chat"),
                            ("ctxrag.cli.serve", "serve", "serve")):
        try:
            module = __import__(mod, fromlist=[attr])
        except ImportError:
            continue
        obj = getattr(module, attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:  # a single command
            app.command(name)(obj)


_mount_optional()

if __name__ == "__main__":  # pragma: no cover
    app()
