"""`ctxrag article write --out` naming a folder or a file in a missing folder is an error before anything is
generated (a real CLI process). Before: a traceback after the article was written by the model."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kb.test_kb_concurrency import _cli, _env
from ctxrag.testing.llm_server import HANG_GUARD_S


def test_article_out_is_checked_before_generating(tmp_path: Path) -> None:
    env = _env(tmp_path / "home", "fake")
    r = subprocess.run(_cli("notes", "add", "The walrus migrates north in spring.", "--kb", "art"), env=env,
                       capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr
    for out, want in ((tmp_path, "is a folder"), (tmp_path / "missing" / "a.md", "does not exist")):
        r = subprocess.run(_cli("article", "write", "Walruses", "--kb", "art", "--out", str(out)), env=env,
                           capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert r.returncode == 1 and f"--out {out}" in r.stderr and want in r.stderr, r.stderr[-1500:]
        assert "Traceback" not in r.stderr
