"""The CLI's error guard: a full disk is reported as a full disk, not as a damaged database; other OS errors are not
swallowed."""
from __future__ import annotations

import errno
import sqlite3

import pytest
import typer

from ctxrag.cli.common import guard


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
