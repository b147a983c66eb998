"""The `ctxrag` command line: ingest, search, ask, manage knowledge bases and documents, evaluate, serve.

The commands live in their own modules (`cli/ingest.py`, `cli/query.py`, `cli/kb.py`, `cli/eval.py`, ...); this one
builds the app, its global options, and mounts them in the order ``ctxrag --help`` lists them.
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from ctxrag.cli.common import STATE
from ctxrag.cli.ingest import import_chunks, ingest
from ctxrag.cli.kb import doc_app, kb_app
from ctxrag.cli.query import ask, demo, search
from ctxrag.settings import get_settings

app = typer.Typer(help="ctxrag: contextual RAG over Chinese and English knowledge bases, offline by default.",
                  rich_markup_mode=None,  # help texts are plain: "[n] citations" must not be read as markup
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(kb_app, name="kb")
app.add_typer(doc_app, name="doc")


@app.callback()
def main(
    debug: bool = typer.Option(False, "--debug", help="Log every stage with full texts to stderr."),
    home: Optional[Path] = typer.Option(None, "--home", help="Data folder (default $CTXRAG_HOME or ~/.ctxrag)."),
) -> None:
    if home is not None:
        os.environ["CTXRAG_HOME"] = str(home)
    get_settings.cache_clear()
    STATE["debug"] = debug
    _redact_output()
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s", force=True)
    if debug:
        for noisy in ("httpx", "httpcore", "openai", "urllib3", "jieba", "faiss"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _redact_output() -> None:
    """Secrets from the settings (and any credential pattern) never reach a log line or the error line."""
    from ctxrag.redact import install_log_redaction, remember_settings

    install_log_redaction()
    try:
        remember_settings(get_settings())
    except Exception:  # noqa: BLE001 - bad settings are reported by the command that reads them
        pass


app.command()(ingest)
app.command("import")(import_chunks)
app.command()(search)
app.command()(ask)
app.command()(demo)


def _mount_optional() -> None:
    """Sub-apps that live in their own modules."""
    for mod, attr, name in (("ctxrag.cli.eval", "eval_app", "eval"), ("ctxrag.cli.notes", "notes_app", "notes"),
                            ("ctxrag.cli.article", "article_app", "article"), ("ctxrag.cli.assistant", "chat", "chat"),
                            ("ctxrag.cli.serve", "serve", "serve"), ("ctxrag.cli.mcp_serve", "mcp", "mcp"),
                            ("ctxrag.cli.doctor", "doctor", "doctor")):
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
