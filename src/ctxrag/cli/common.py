"""What every `ctxrag` command shares: the --debug state, opening knowledge bases by name, checking the query, and
turning expected failures into a one-line error with exit code 1.

Example::

    from ctxrag.cli.common import guard, open_kb
    guard(lambda: print(open_kb("demo").stats()))
"""
from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional, TypeVar

import typer

from ctxrag.enums import SearchMode
from ctxrag.errors import CtxragError, is_disk_full
from ctxrag.settings import get_settings

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.retrievers import BaseRetriever

    from ctxrag.kb import KnowledgeBaseProtocol

T = TypeVar("T")

STATE: dict[str, Any] = {"debug": False}


def mode_option() -> Any:
    """The ``--mode`` option of every command that searches: a `SearchMode` (any spelling ``SearchMode.from_str``
    reads; an unknown one is a usage error naming the choices), default and help from the mode table."""
    from ctxrag.retrievers.modes import DEFAULT_MODE, mode_help

    return typer.Option(DEFAULT_MODE.value, "--mode", parser=SearchMode.from_str, help=mode_help())


def fail(msg: str, code: int = 1) -> NoReturn:
    from ctxrag.redact import redact

    typer.echo(f"error: {redact(msg)}", err=True)
    raise typer.Exit(code)


def callbacks() -> list[BaseCallbackHandler]:
    if not STATE["debug"]:
        return []
    from ctxrag.debug import DebugLogHandler

    return [DebugLogHandler()]


def open_kb(name: str, create: bool = False) -> KnowledgeBaseProtocol:
    """The knowledge base `name`, in the store the settings name (`ctxrag.kb.registry`)."""
    from ctxrag.kb import open_kb as open_named

    return open_named(name, get_settings(), create=create)


def kb_or_default(kb: Optional[str]) -> str:
    """`--kb` as given (an empty one is an error, not the default), or the default knowledge base."""
    from ctxrag.kb import validate_kb_name

    return get_settings().default_kb if kb is None else validate_kb_name(kb)


def check_text(text: str, what: str) -> str:
    from ctxrag.text import check_query

    return check_query(text, get_settings().max_query_chars, what=what)


def guard(fn: Callable[[], T]) -> T:
    """Run a command body, turning expected failures into a one-line error and exit code 1."""
    try:
        return fn()
    except typer.Exit:
        raise
    except CtxragError as e:
        fail(str(e))
    except (sqlite3.DatabaseError, OSError) as e:
        if is_disk_full(e, get_settings().home):  # a write outside a knowledge base's write session
            fail(f"the disk is full ({e}); nothing was lost (what was committed before is intact): free some space "
                 "and run it again")
        if not isinstance(e, sqlite3.DatabaseError):
            _fail_if_model_error(e)
            raise
        fail(f"a SQLite database is damaged or busy ({e}); see `ctxrag kb check NAME`")  # past what opening checks
    except Exception as e:  # noqa: BLE001 - model failures become one line, the rest keep their traceback
        _fail_if_model_error(e)
        raise


def _fail_if_model_error(error: Exception) -> None:
    """A dead, refusing or garbled endpoint (chat, embeddings, rerank) raises its client's own errors, whose text
    may echo the API key: one redacted line naming the endpoint instead of a traceback."""
    from ctxrag.models.chat import as_model_error

    model_error = as_model_error(error, None)
    if model_error is not None:
        fail(str(model_error))


def retriever_for(kbs: list[str], mode: SearchMode, k: int, rerank: str, search_type: str) -> BaseRetriever:
    """A retriever over the named knowledge bases; the shared default one (``general``) is created, empty, on first
    use, so ``--kb general`` and no ``--kb`` work before anything was ingested there. Any other name must exist."""
    from ctxrag.retrievers.factory import make_multi_kb_retriever

    return make_multi_kb_retriever(open_kbs(kbs), mode=mode, k=k, rerank=rerank, search_type=search_type)


def open_kbs(kbs: list[str]) -> list[KnowledgeBaseProtocol]:
    """The named knowledge bases, the shared default one created (empty) on first use; any other name must exist."""
    default = get_settings().default_kb
    return [open_kb(n, create=n == default) for n in kbs]


def kb_names(kb: Optional[list[str]]) -> list[str]:
    return kb or [get_settings().default_kb]
