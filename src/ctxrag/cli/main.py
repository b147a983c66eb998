"""The `ctxrag` command line: ingest, search, ask, manage knowledge bases and documents, evaluate, serve.

The commands live in their own modules (`cli/ingest.py`, `cli/query.py`, `cli/kb.py`, `cli/eval.py`, ...); this one
builds the app, its global options, and mounts them from one table, `COMMANDS`, in the order ``ctxrag --help``
lists them. A command module that fails to import fails ``ctxrag`` loudly; only a row's ``requires`` (third-party
packages an extra installs) may be missing, and then only that command is left out.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from ctxrag.cli.common import STATE
from ctxrag.settings import get_settings

log = logging.getLogger(__name__)

app = typer.Typer(help="ctxrag: contextual RAG over Chinese and English knowledge bases, offline by default.",
                  rich_markup_mode=None,  # help texts are plain: "[n] citations" must not be read as markup
                  no_args_is_help=True, pretty_exceptions_enable=False)


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


@dataclass(frozen=True)
class CommandRow:
    """One ``ctxrag`` command: its name, the module and attribute that define it (a `typer.Typer` group or a
    command function), and the third-party packages (top-level import names) whose absence leaves it out."""

    name: str
    module: str
    attr: str
    requires: tuple[str, ...] = ()


COMMANDS: tuple[CommandRow, ...] = (
    CommandRow("kb", "ctxrag.cli.kb", "kb_app"),
    CommandRow("doc", "ctxrag.cli.kb", "doc_app"),
    CommandRow("ingest", "ctxrag.cli.ingest", "ingest"),
    CommandRow("import", "ctxrag.cli.ingest", "import_chunks"),
    CommandRow("search", "ctxrag.cli.query", "search"),
    CommandRow("ask", "ctxrag.cli.query", "ask"),
    CommandRow("demo", "ctxrag.cli.query", "demo"),
    CommandRow("eval", "ctxrag.cli.eval", "eval_app"),
    CommandRow("notes", "ctxrag.cli.notes", "notes_app"),
    CommandRow("article", "ctxrag.cli.article", "article_app"),
    CommandRow("chat", "ctxrag.cli.assistant", "chat"),
    CommandRow("model", "ctxrag.cli.model", "model_app"),
    CommandRow("serve", "ctxrag.cli.serve", "serve"),  # checks its extra (uvicorn, langserve) when run, to say which
    CommandRow("mcp", "ctxrag.cli.mcp_serve", "mcp"),  # checks its extra (mcp) when run, to say which
    CommandRow("doctor", "ctxrag.cli.doctor", "doctor"),
)
"""Every command, in the order ``ctxrag --help`` lists them. No shipped command module imports an optional package
at import time, so none has ``requires``: a command that needs an extra checks for it when run and names it."""


def mount(target: typer.Typer, rows: Sequence[CommandRow]) -> list[str]:
    """Add each row's command to `target`; returns the names left out because a package in their ``requires`` is
    not installed. Any other `ImportError` (a broken ctxrag module, a package the row does not list, a name missing
    from an installed package) is raised."""
    skipped = []
    for row in rows:
        if any(name.split(".")[0] == "ctxrag" for name in row.requires):
            raise ValueError(f"command {row.name!r}: requires lists {row.requires}; only third-party packages may "
                             "be optional, a ctxrag module must import")
        try:
            module = importlib.import_module(row.module)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if missing not in row.requires:
                raise
            log.debug("command %r left out: %s is not installed", row.name, missing)
            skipped.append(row.name)
            continue
        obj = getattr(module, row.attr)
        if isinstance(obj, typer.Typer):
            target.add_typer(obj, name=row.name)
        else:  # a single command
            target.command(row.name)(obj)
    return skipped


mount(app, COMMANDS)

if __name__ == "__main__":  # pragma: no cover
    app()
