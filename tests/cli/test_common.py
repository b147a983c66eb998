"""The CLI's error guard: a full disk is reported as a full disk, not as a damaged database; other OS errors are not
swallowed."""
from __future__ import annotations

import errno
import sqlite3

import pytest
import typer

from ctxrag.cli.common import guard, mode_option
from ctxrag.enums import SearchMode


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   sqlite3.OperationalError("database or disk is full")])
def test_a_full_disk_is_one_line_saying_so(error: Exception, capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> None:
        raise error

    with pytest.raises(typer.Exit):
        guard(body)
    err = capsys.readouterr().err
    assert err.startswith("error: the disk is full") and "damaged" not in err


def test_other_os_errors_are_not_turned_into_disk_full() -> None:
    def body() -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    with pytest.raises(PermissionError):
        guard(body)


def test_mode_option_reads_any_spelling_and_names_the_choices_of_an_unknown_mode() -> None:
    from typer.testing import CliRunner

    from ctxrag.retrievers.modes import MODES

    app = typer.Typer(rich_markup_mode=None)  # plain help, as the ctxrag app has

    @app.command()
    def show(mode: SearchMode = mode_option()) -> None:
        typer.echo(repr(mode))

    runner = CliRunner()
    assert runner.invoke(app, []).stdout.strip() == repr(SearchMode.HYBRID)
    assert runner.invoke(app, ["--mode", "BM-25"]).stdout.strip() == repr(SearchMode.BM25)
    assert runner.invoke(app, ["--mode", "milvus-hybrid"]).stdout.strip() == repr(SearchMode.MILVUS_HYBRID)
    bad = runner.invoke(app, ["--mode", "sparse"])
    def unboxed(text: str) -> str:  # rich's boxes and wrapping undone
        return " ".join(text.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())

    message = unboxed(bad.output)
    assert bad.exit_code == 2 and "unknown search mode 'sparse'; choose one of: dense, bm25, hybrid" in message
    help_text = unboxed(runner.invoke(app, ["--help"]).stdout)
    assert all(f"{row.mode.value}" in help_text and " ".join(row.help.split()) in help_text for row in MODES.values())
