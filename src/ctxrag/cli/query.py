"""`ctxrag search`, `ctxrag ask` and `ctxrag demo`: ranked chunks, and answers streamed with their sources.

    ctxrag search "FaissIndex.search 的参数" --kb myproject -k 10 --mode hybrid --json
    ctxrag ask "星河知识库支持哪些文件格式？" --kb myproject
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer

from ctxrag.cli.common import callbacks, check_text, guard, kb_names, mode_option, open_kb, open_kbs, retriever_for
from ctxrag.cli.display import printable
from ctxrag.enums import SearchMode
from ctxrag.errors import CtxragError
from ctxrag.settings import get_settings

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import Runnable, RunnableConfig

    from ctxrag.ingest_report import IngestReport
    from ctxrag.kb import KnowledgeBaseProtocol

def search(
    query: str = typer.Argument(...),
    kb: Optional[list[str]] = typer.Option(None, "--kb", help="Knowledge base(s); repeat to search several."),
    k: int = typer.Option(10, "-k", "--k", min=1),
    mode: SearchMode = mode_option(),
    rerank: str = typer.Option("none", "--rerank", help="none | jina | llm"),
    search_type: str = typer.Option("similarity", "--search-type", help="similarity | mmr (dense side)"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Ranked chunks with score, source, chunk id and the full chunk text."""

    def body() -> None:
        checked = check_text(query, "query")
        retriever = retriever_for(kb_names(kb), mode, k, rerank, search_type)
        docs = retriever.invoke(checked, config={"callbacks": callbacks()})
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

    guard(body)


def ask(
    question: str = typer.Argument(...),
    kb: Optional[list[str]] = typer.Option(None, "--kb", help="Knowledge base(s); repeat to use several."),
    k: int = typer.Option(4, "-k", "--k", min=1, help="Chunks given to the model."),
    mode: SearchMode = mode_option(),
    rerank: str = typer.Option("none", "--rerank"),
    json_out: bool = typer.Option(False, "--json"),
    multi_hop: bool = typer.Option(False, "--multi-hop", help="Retrieve again for each sub-question the model asks "
                                   "(iterative retrieval, -k new chunks per hop); for questions that chain facts."),
    max_hops: int = typer.Option(3, "--max-hops", min=1, help="Most retrievals per question with --multi-hop."),
    decompose: bool = typer.Option(False, "--decompose", help="With --multi-hop: split the question into simple "
                                   "sub-questions first, then answer each over its own retrieval."),
    bridge: Optional[bool] = typer.Option(None, "--bridge/--no-bridge", help="With --multi-hop: ask only for the "
                                          "missing name at each hop and retrieve for it, then a short answer over "
                                          "every passage read (the default without --decompose); --no-bridge: the "
                                          "loop that keeps one fact per hop."),
) -> None:
    """Answer a question from the knowledge base with [n] citations; streams to the terminal."""
    from ctxrag.chains.ask import RagAnswer
    from ctxrag.models.chat import make_chat_model, prestart_chat_model, wrap_model_errors

    if decompose and not multi_hop:
        raise typer.BadParameter("--decompose needs --multi-hop", param_hint="--decompose")
    if bridge is not None and not multi_hop:
        flag = "--bridge" if bridge else "--no-bridge"
        raise typer.BadParameter(f"{flag} needs --multi-hop", param_hint=flag)
    if bridge and decompose:
        raise typer.BadParameter("--bridge and --decompose are two ways to hop: choose one", param_hint="--bridge")

    def body() -> None:
        checked = check_text(question, "question")
        llm = make_chat_model(get_settings(), warm=True)
        prestart_chat_model(llm)  # a local model loads while the knowledge base opens and retrieves
        names = kb_names(kb)
        chain = answer_chain(names, llm, k=k, mode=mode, rerank=rerank, multi_hop=max_hops if multi_hop else 0,
                             decompose=decompose, bridge=bridge)
        cfg: RunnableConfig = {"callbacks": callbacks()}
        if json_out:
            with wrap_model_errors(llm):
                out = chain.invoke(checked, config=cfg)
            answer = RagAnswer.from_output({**out, "question": question})
            hops = {"hops": out["hops"]} if multi_hop else {}
            typer.echo(json.dumps({**answer.to_json(), **hops}, ensure_ascii=False, indent=1))
            return
        final = stream_answer(chain, llm, checked, cfg)
        for n, hop in enumerate(final.get("hops", []), 1):
            said = hop["fact"] or hop["answer"] or hop["next_question"] or hop["error"] or "-"
            typer.echo(f"hop {n}: {printable(hop['query'])} -> {printable(said)}")

    guard(body)


def answer_chain(kbs: Sequence[str | KnowledgeBaseProtocol], llm: BaseChatModel, *, k: int = 4,
                 mode: SearchMode | str = SearchMode.HYBRID, rerank: str = "none",
                 multi_hop: int = 0, decompose: bool = False, bridge: bool | None = None,
                 focus: int | None = None) -> Runnable[Any, Any]:
    """`ctxrag.chains.ask.build_ask_chain` over `kbs`: names, or knowledge bases already open (each is opened once
    either way). ``focus``: None follows the ``answer_focus_chars`` setting; a number of characters (0: whole chunks)."""
    from ctxrag.chains.ask import build_ask_chain

    opened = [open_kbs([x])[0] if isinstance(x, str) else x for x in kbs]
    return build_ask_chain(opened, llm, k=k, mode=mode, rerank=rerank, multi_hop=multi_hop, decompose=decompose,
                           bridge=bridge, focus=focus)


def stream_answer(chain: Runnable[Any, Any], llm: BaseChatModel, question: str,
                  config: RunnableConfig) -> dict[str, Any]:
    """Print the answer as the model writes it, then its sources; returns the non-answer fields."""
    from ctxrag.models.chat import wrap_model_errors

    final: dict[str, Any] = {}
    with wrap_model_errors(llm):
        for chunk in chain.stream(question, config=config):
            if "answer" in chunk:
                typer.echo(chunk["answer"], nl=False)
            final.update({k: v for k, v in chunk.items() if k != "answer"})
    typer.echo("")
    if final.get("supported") is False:
        typer.echo(f"\n(no retrieved chunk supports an answer: {(final.get('relevance') or {}).get('reason', '')})")
        return final
    print_sources(final.get("sources", []), final.get("invalid_citations", []), final.get("citations", []))
    return final


def print_sources(sources: list[dict[str, Any]], invalid: list[int],
                  citations: list[dict[str, Any]] | None = None) -> None:
    model_cited = {n for c in citations or [] for n in c.get("cited", [])}
    listed = {s["n"] for s in sources}
    if sources:
        inferred = all(s.get("inferred") for s in sources)
        head = ("\nSources:" if not inferred else "\nSources (found by the citation check; the model cited none):"
                if not model_cited else "\nSources (corrected by the citation check):")
        typer.echo(head)
        for s in sources:
            where = f" > {s['heading_path']}" if s.get("heading_path") else ""
            tag = ("  (added by the citation check: holds the answer's words or figures)"
                   if s.get("inferred") and not inferred else "")
            typer.echo(f"  [{s['n']}] {printable(s['source'])}{printable(where)}  ({s['chunk_id']}){tag}")
    else:
        typer.echo("\n(no sources cited)")
    dropped = sorted(model_cited - listed)
    if dropped:
        typer.echo(f"  (the model's {', '.join(f'[{n}]' for n in dropped)} dropped by the check: "
                   "no fact of its sentence is in that chunk)")
    for c in citations or []:
        if c.get("status") == "unsupported":
            typer.echo(f"  (no source holds: {printable(c['sentence'][:120])})")
    if invalid:
        typer.echo(f"  (the model cited sources that do not exist: {invalid})")


def demo(
    corpus: Optional[Path] = typer.Option(None, help="Folder to ingest (default: the sample corpus shipped with ctxrag)."),
    questions: Optional[Path] = typer.Option(None, help="JSON list of questions (default: the shipped sample questions)."),
    kb: str = typer.Option("demo", "--kb"),
    contextualize: bool = typer.Option(False, "--contextualize/--no-contextualize",
                                       help="Give chunks a context at ingest (off: the demo answers sooner)."),
) -> None:
    """Ingest the sample corpus and answer its questions with cited sources (the embedded offline default).

    Works from any folder: the corpus and questions ship inside the package. When the demo fails, the knowledge base
    it created is removed again."""
    from ctxrag.kb import KnowledgeBase, validate_kb_name
    from ctxrag.models.chat import make_chat_model, prestart_chat_model
    from ctxrag.resource_paths import demo_corpus, demo_questions

    def body() -> None:
        s = get_settings()
        folder = corpus or demo_corpus()
        items = read_questions(questions or demo_questions())  # a bad file fails before anything is written
        name = validate_kb_name(kb)
        is_new = name not in KnowledgeBase.list_names(s)
        kbase = open_kb(name, create=True)
        try:
            llm = make_chat_model(s, warm=True)
            if not contextualize:  # a local model loads while the corpus is read, split and embedded
                prestart_chat_model(llm)
            report = demo_ingest(kbase, folder, contextualize=contextualize)
            typer.echo(f"ingested {folder}: {len(report.added)} added, {len(report.updated)} updated, "
                       f"{len(report.skipped)} skipped, {len(report.failed)} failed")
            for f in report.failed:
                typer.echo(f"  failed {printable(f.path)}: {printable(f.reason)}")
            if not kbase.list_documents():
                raise CtxragError(f"no file of {folder} could be ingested; nothing to answer from")
            typer.echo(f"answering with {describe_model(llm)}")
            chain = answer_chain([kbase], llm)
            for q in items:
                typer.echo(f"\nQ: {q}\nA: ", nl=False)
                stream_answer(chain, llm, q, {"callbacks": callbacks()})
        except BaseException:
            kbase.close()
            if is_new and name in KnowledgeBase.list_names(s):
                KnowledgeBase.delete_kb(name, s)  # a failed demo leaves no knowledge base behind
                typer.echo(f"demo failed: knowledge base {name!r} removed again", err=True)
            raise

    guard(body)


def demo_ingest(kbase: KnowledgeBaseProtocol, folder: Path, *, contextualize: bool = False,
                progress: bool = True) -> IngestReport:
    """How `ctxrag demo` fills its knowledge base (contexts off by default: the demo answers sooner)."""
    return kbase.ingest([folder], contextualize=contextualize, progress=progress)


def read_questions(path: Path) -> list[str]:
    """The questions of a demo file: a JSON list of strings or of objects with a ``question``."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CtxragError(f"--questions {path}: cannot read a JSON list of questions ({exc})") from None
    if not isinstance(items, list) or not items:
        raise CtxragError(f"--questions {path}: expected a non-empty JSON list, got {type(items).__name__}")
    out = [item.get("question") if isinstance(item, dict) else item for item in items]
    bad = next((i for i, q in enumerate(out) if not isinstance(q, str) or not q.strip()), None)
    if bad is not None:
        raise CtxragError(f"--questions {path}: item {bad} has no question text: {items[bad]!r}")
    return [str(q) for q in out]  # each checked to be a non-blank string above


def describe_model(llm: BaseChatModel) -> str:
    """One line naming the chat model for the demo: the local GGUF (and how to switch) or the endpoint's model."""
    path = getattr(llm, "model_path", None)
    if path:
        return (f"the local model {getattr(llm, 'model_name', '') or Path(path).stem} (in-process llama.cpp; "
                "CTXRAG_LLM__LOCAL_MODEL=0.5b picks the faster, weaker 0.5B)")
    return f"{getattr(llm, 'model_name', None) or getattr(llm, 'model', '?')} at {getattr(llm, 'openai_api_base', '?')}"
