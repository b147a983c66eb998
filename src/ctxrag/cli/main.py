"""The `ctxrag` command line: ingest, search, ask, manage knowledge bases and documents, evaluate, serve."""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer

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


def _guard(fn: Any) -> Any:
    """Run a command body, turning expected failures into a one-line error and exit code 1."""
    try:
        return fn()
    except typer.Exit:
        raise
    except CtxragError as e:
        _err(str(e))


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
        s = get_settings()
        kbase = _open(kb or s.default_kb, create=True)
        ctx = None
        pre = None
        if contexts is not None:
            from ctxrag.indexing import load_precomputed_contexts

            pre = load_precomputed_contexts(contexts)
        elif contextualize if contextualize is not None else s.contextualize:
            from ctxrag.indexing import Contextualizer

            ctx = Contextualizer(settings=s, show_progress=True)
        report = kbase.ingest(paths, contextualizer=ctx, precomputed_contexts=pre)
        if json_out:
            typer.echo(json.dumps({"kb": kbase.name, "files": [f.__dict__ for f in report.files],
                                   "context_report": getattr(report.context_report, "__dict__", None)},
                                  ensure_ascii=False, indent=1, default=str))
        else:
            for f in report.files:
                extra = f" ({f.chunks} chunks)" if f.status in ("added", "updated") else ""
                reason = f": {f.reason}" if f.reason else ""
                typer.echo(f"{f.status:8s} {f.path}{extra}{reason}")
            typer.echo(f"{len(report.added)} added, {len(report.updated)} updated, {len(report.skipped)} skipped, "
                       f"{len(report.failed)} failed -> knowledge base {kbase.name!r}")
            if report.context_report is not None:
                typer.echo(f"contexts: {report.context_report}")
        if report.failed:
            raise typer.Exit(1)

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
        docs = _retriever(_kb_names(kb), mode, k, rerank, search_type).invoke(query, config={"callbacks": _callbacks()})
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
            typer.echo(f"#{i}  score={score:.4f}  {md.get('source')}  [{md.get('chunk_id')}]"
                       if isinstance(score, float) else f"#{i}  {md.get('source')}  [{md.get('chunk_id')}]")
            if md.get("heading_path"):
                typer.echo(f"    {md['heading_path']}")
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
        llm = make_chat_model()
        chain = build_rag_chain(_retriever(_kb_names(kb), mode, k, rerank, "similarity"), llm)
        cfg = {"callbacks": _callbacks()}
        if json_out:
            with wrap_model_errors(llm):
                out = chain.invoke(question, config=cfg)
            typer.echo(json.dumps({"question": question, "answer": out["answer"], "sources": out["sources"],
                                   "invalid_citations": out["invalid_citations"],
                                   "retrieved": [d.metadata.get("chunk_id") for d in out["documents"]]},
                                  ensure_ascii=False, indent=1))
            return
        stream_answer(chain, llm, question, cfg)

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
            typer.echo(f"  [{s['n']}] {s['source']}{where}  ({s['chunk_id']})")
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
    _guard(lambda: typer.echo(json.dumps(_open(name).stats(), indent=1)))


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
    from ctxrag.settings import get_settings

    def body() -> None:
        docs = _open(kb or get_settings().default_kb).list_documents()
        if json_out:
            typer.echo(json.dumps([{"doc_id": d.doc_id, "source": d.source, "title": d.title, "chunks": d.n_chunks}
                                   for d in docs], ensure_ascii=False, indent=1))
            return
        for d in docs:
            typer.echo(f"{d.doc_id}  {d.n_chunks:4d} chunks  {d.source}  ({d.title})")

    _guard(body)


@doc_app.command("delete")
def doc_delete(doc: str = typer.Argument(..., help="Document id, source path or unique file name."),
               kb: str = typer.Option(None, "--kb")) -> None:
    """Delete a document from the store and every index."""
    from ctxrag.settings import get_settings

    def body() -> None:
        rec = _open(kb or get_settings().default_kb).delete_document(doc)
        typer.echo(f"deleted {rec.source} ({rec.doc_id}, {rec.n_chunks} chunks)")

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
