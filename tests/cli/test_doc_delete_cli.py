"""`ctxrag doc delete KEY` (a real CLI process) matches a doc id, a whole source path, or a whole trailing part of
it (a file name, ``dir/name.md``), case-sensitive; several matches are an error listing them.

Before: any suffix matched, case-insensitively: ``''`` deleted the only document, ``1.txt`` deleted gamma1.txt and
``ta.md`` beta.md."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from test_kb_concurrency import _cli, _env
from ctxrag.testing.llm_server import HANG_GUARD_S


def _docs(env: dict[str, str]) -> str:
    return subprocess.run(_cli("doc", "list", "--kb", "one"), env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S).stdout


def test_doc_delete_matches_whole_path_parts_only(tmp_path: Path) -> None:
    env = _env(tmp_path / "home", "fake")
    corpus = tmp_path / "corpus"
    for rel, text in (("gamma1.txt", "gamma one"), ("beta.md", "# Beta\n\nbeta"), ("a/x.md", "# X\n\nfirst x"),
                      ("b/x.md", "# X\n\nsecond x")):
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text(text + " about a lighthouse.\n", encoding="utf-8")
    r = subprocess.run(_cli("ingest", str(corpus), "--kb", "one"), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr
    for key in ("", "1.txt", "ta.md", "BETA.MD", "eta.md"):
        r = subprocess.run(_cli("doc", "delete", key, "--kb", "one"), env=env, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
        assert r.returncode == 1 and "no document" in r.stderr and "Traceback" not in r.stderr, (key, r.stderr)
    r = subprocess.run(_cli("doc", "delete", "x.md", "--kb", "one"), env=env, capture_output=True, text=True,
                       timeout=HANG_GUARD_S)
    assert r.returncode == 1 and "matches 2 documents" in r.stderr, r.stderr
    assert str(corpus / "a" / "x.md") in r.stderr and str(corpus / "b" / "x.md") in r.stderr
    listed = _docs(env)
    assert all(n in listed for n in ("gamma1.txt", "beta.md", "a/x.md", "b/x.md")), listed
    for key in ("beta.md", "a/x.md", str(corpus / "gamma1.txt")):
        r = subprocess.run(_cli("doc", "delete", key, "--kb", "one"), env=env, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
        assert r.returncode == 0, (key, r.stderr)
    listed = _docs(env)
    assert "b/x.md" in listed and not any(n in listed for n in ("gamma1.txt", "beta.md", "a/x.md")), listed
