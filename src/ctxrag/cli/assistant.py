"""`ctxrag chat`: the routing assistant (chat / RAG / "no material" / summary of selected documents), streaming.

    ctxrag chat "JINA最近有什么新研究？" --kb demo
    ctxrag chat "这几篇文章讲了什么？" --kb demo --doc release_notes.txt --doc xinghe_overview.md
    ctxrag chat --kb demo                  # interactive, keeps the conversation for follow-ups
"""
from __future__ import annotations

import json
from typing import Any, Optional

import typer

from ctxrag.cli.common import callbacks, kb_or_default
from ctxrag.cli.query import print_sources
from ctxrag.errors import CtxragError
from ctxrag.settings import get_settings


def chat(
    question: Optional[str] = typer.Argument(None, help="One question; omit for an interactive session."),
    kb: Optional[str] = typer.Option(None, "--kb", help="Knowledge base (default: the shared 'general' one)."),
    doc: Optional[list[str]] = typer.Option(None, "--doc", help="Selected document (id, path or file name); repeat."),
    router: str = typer.Option("fast", "--router", help="fast (embeddings) | llm (falls back to fast)."),
    general: bool = typer.Option(False, "--general/--no-general",
                                 help="When the knowledge base has nothing, also answer from general knowledge."),
    k: int = typer.Option(4, "-k", min=1, help="Chunks given to the model on the RAG route."),
    json_out: bool = typer.Option(False, "--json", help="Print the whole result as JSON (no streaming)."),
) -> None:
    """Ask anything: the assistant decides whether to use the knowledge base, and says when it has nothing."""
    from ctxrag.chains.assistant import build_assistant_chain
    from ctxrag.kb import KnowledgeBase
    from ctxrag.models.chat import make_chat_model, wrap_model_errors

    try:
        kbase = KnowledgeBase.open(kb_or_default(kb), get_settings(), create=False)
        selected = [kbase.get_document(d).doc_id for d in doc or []]
        llm = make_chat_model(get_settings(), warm=True)
        bot = build_assistant_chain(kbase, llm, router=router, k=k, evidence=get_settings().answer_evidence)
        history: list[tuple[str, str]] = []

        def ask(q: str) -> None:
            inp = {"question": q, "selected_doc_ids": selected, "history": history, "allow_general_knowledge": general}
            cfg: Any = {"callbacks": callbacks()}
            with wrap_model_errors(llm):
                if json_out:
                    out = bot.invoke(inp, cfg)
                    out["documents"] = [d.metadata.get("chunk_id") or d.metadata.get("doc_id") for d in out["documents"]]
                    typer.echo(json.dumps(out, ensure_ascii=False, indent=1, default=str))
                    answer = out["answer"]
                else:
                    final: dict[str, Any] = {}
                    answer = ""
                    for chunk in bot.stream(inp, cfg):
                        if "route" in chunk:
                            typer.echo(f"[route: {chunk['route']} via {chunk['decision']['router_used']}]", err=True)
                        if "answer" in chunk:
                            answer += chunk["answer"]
                            typer.echo(chunk["answer"], nl=False)
                        final.update({k2: v for k2, v in chunk.items() if k2 != "answer"})
                    typer.echo("")
                    if final.get("route") in ("rag", "summary"):
                        print_sources([{**s, "chunk_id": s.get("chunk_id") or s.get("doc_id")}
                                       for s in final.get("sources", [])], final.get("invalid_citations", []))
            history.extend([("human", q), ("ai", answer)])

        if question:
            ask(question)
            return
        typer.echo("ctxrag chat — empty line or Ctrl-D to quit", err=True)
        while True:
            try:
                q = input("> ").strip()
            except EOFError:
                break
            if not q:
                break
            ask(q)
    except CtxragError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
