"""`ctxrag notes ...`: keep notes in a knowledge base (add, edit, tag, delete, list, search, show).

    ctxrag notes add "混合检索用 RRF 合并两路结果" --title 混合检索 --tag retrieval
    ctxrag notes add --file answer.json --from-answer      # an `ctxrag chat --json` answer, citations kept
    ctxrag notes search "RRF" --tag retrieval
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ctxrag.errors import CtxragError
from ctxrag.cli.common import guard, kb_or_default
from ctxrag.settings import get_settings

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.kb.notes import Note, NoteBook

notes_app = typer.Typer(help="Keep notes (retrievable like documents) and turn them into articles.", no_args_is_help=True)


def _book(kb: Optional[str]) -> NoteBook:
    from ctxrag.kb import KnowledgeBase
    from ctxrag.kb.notes import NoteBook
    return NoteBook(KnowledgeBase.open(kb_or_default(kb), get_settings(), create=True))


def _show(note: Note, json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(note.to_dict(), ensure_ascii=False, indent=1))
        return
    tags = f"  #{' #'.join(note.tags)}" if note.tags else ""
    typer.echo(f"[{note.id}] {note.title}{tags}")


KB = typer.Option(None, "--kb", help="Knowledge base (default: the shared 'general' one).")


@notes_app.command("add")
def add(
    text: Optional[str] = typer.Argument(None, help="Note text (or use --file)."),
    file: Optional[Path] = typer.Option(None, "--file", help="Read the text (or the answer JSON) from this file."),
    from_answer: bool = typer.Option(False, "--from-answer", help="The input is an answer JSON; keep its citations."),
    title: Optional[str] = typer.Option(None, "--title"),
    tag: Optional[list[str]] = typer.Option(None, "--tag", help="Repeat for several tags."),
    kb: Optional[str] = KB,
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Create a note from text, a file, or a saved answer."""

    def body() -> None:
        raw = file.read_text(encoding="utf-8") if file else text
        if not raw or not raw.strip():
            raise CtxragError("give the note text as an argument or with --file")
        book = _book(kb)
        if from_answer:
            try:
                answer = json.loads(raw)
            except ValueError as e:
                raise CtxragError(f"--from-answer expects answer JSON: {e}") from None
            note = book.from_answer(answer, title=title, tags=tag or [])
        else:
            note = book.create(raw, title=title, tags=tag or [])
        _show(note, json_out)

    guard(body)


@notes_app.command("edit")
def edit(note_id: int = typer.Argument(...), text: Optional[str] = typer.Option(None, "--text"),
         title: Optional[str] = typer.Option(None, "--title"), kb: Optional[str] = KB) -> None:
    """Change a note's text or title."""
    guard(lambda: _show(_book(kb).edit(note_id, text=text, title=title), False))


@notes_app.command("tag")
def tag(note_id: int = typer.Argument(...), add: Optional[list[str]] = typer.Option(None, "--add"),
        remove: Optional[list[str]] = typer.Option(None, "--remove"), kb: Optional[str] = KB) -> None:
    """Add or remove tags."""
    guard(lambda: _show(_book(kb).tag(note_id, add=add or [], remove=remove or []), False))


@notes_app.command("delete")
def delete(note_id: int = typer.Argument(...), kb: Optional[str] = KB) -> None:
    """Delete a note (and its chunks)."""
    guard(lambda: typer.echo(f"deleted note {_book(kb).delete(note_id).id}"))


@notes_app.command("list")
def list_notes(tag: Optional[str] = typer.Option(None, "--tag"), kb: Optional[str] = KB,
               json_out: bool = typer.Option(False, "--json")) -> None:
    """All notes (or those with a tag)."""

    def body() -> None:
        notes = _book(kb).list(tag=tag)
        if json_out:
            typer.echo(json.dumps([n.to_dict() for n in notes], ensure_ascii=False, indent=1))
        elif not notes:
            typer.echo("no notes")
        for n in notes if not json_out else []:
            _show(n, False)

    guard(body)


@notes_app.command("show")
def show(note_id: int = typer.Argument(...), kb: Optional[str] = KB) -> None:
    """One note in full, with its citations."""

    def body() -> None:
        n = _book(kb).get(note_id)
        _show(n, False)
        typer.echo(n.text)
        for c in n.citations:
            typer.echo(f"  [{c.get('n')}] {c.get('source')}  ({c.get('chunk_id', '')})")

    guard(body)


@notes_app.command("search")
def search(query: str = typer.Argument(...), k: int = typer.Option(5, "-k", min=1),
           tag: Optional[str] = typer.Option(None, "--tag"), kb: Optional[str] = KB) -> None:
    """Notes matching a query (hybrid retrieval restricted to the notes collection)."""

    def body() -> None:
        hits = _book(kb).search(query, k=k, tag=tag)
        if not hits:
            typer.echo("no matching notes")
        for note, score in hits:
            typer.echo(f"{score:.4f}  ", nl=False)
            _show(note, False)

    guard(body)
