"""`ctxrag ingest` of a folder tree 2,100 levels deep whose paths pass the system's 4,096-byte limit (a real CLI
process): the reachable files are ingested and the folders that cannot be listed are reported as failed, never a
RecursionError aborting the ingest, never silently skipped. Before: RecursionError from os.walk; long paths were
skipped without a word ("4 added, 0 failed")."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kb.test_kb_concurrency import _cli, _env
from ctxrag.testing.llm_server import HANG_GUARD_S

DEPTH = 2_100


def _deep_tree(top: Path) -> None:
    """`top/d/d/.../d` (DEPTH levels) with a file every 500 levels, made relative to open folders (openat), since
    the whole path is longer than the system allows."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for level in range(1, DEPTH + 1):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if level % 500 == 0:
                out = os.open(f"level{level}.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
                os.write(out, f"# Level {level}\n\nA file {level} folders down about a quokka.\n".encode())
                os.close(out)
    finally:
        os.close(fd)


def _remove_deep_tree(top: Path) -> None:
    """Remove ``top/d/d/...`` without long paths or recursion (pytest's own clean-up of old temporary folders, shared
    by every run on the machine, would die on it): move each level's child up, then remove the level."""
    level, nxt = top / "d", top / "d.next"
    while level.is_dir():
        if (level / "d").is_dir():
            os.rename(level / "d", nxt)
        shutil.rmtree(level)
        if nxt.is_dir():
            os.rename(nxt, level)


def test_deep_tree_reports_unlistable_folders_and_ingests_the_rest(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "top.md").write_text("# Top\n\nThe top file about a walrus.\n", encoding="utf-8")
    try:
        _deep_tree(corpus)
        r = subprocess.run(_cli("ingest", str(corpus), "--kb", "deep"), env=_env(tmp_path / "home", "fake"),
                           capture_output=True, text=True, timeout=HANG_GUARD_S)
    finally:
        _remove_deep_tree(corpus)
    out = r.stdout + r.stderr
    assert "Traceback" not in out and "RecursionError" not in out, out[-2000:]
    assert "top.md" in r.stdout and "level500.md" in r.stdout, r.stdout[-2000:]
    assert r.returncode == 1 and "cannot list this folder" in r.stdout, out[-2000:]
    assert " 0 failed" not in r.stdout
