"""`ctxrag doc delete KEY` (a real CLI process; in the fast lane the same command in-process) matches a doc id, a
whole source path, or a whole trailing part of it (a file name, ``dir/name.md``), case-sensitive; several matches are
an error listing them.

Before: any suffix matched, case-insensitively: ``''`` deleted the only document, ``1.txt`` deleted gamma1.txt and
``ta.md`` beta.md."""
from __future__ import annotations

from pathlib import Path

import pytest

from kb_processes import run_cli
from kb.test_kb_concurrency import _env

PROCESS = pytest.mark.parametrize("process", [False, pytest.param(True, marks=pytest.mark.slow)],
                                  ids=["in-process", "process"])


@PROCESS
def test_doc_delete_matches_whole_path_parts_only(tmp_path: Path, process: bool) -> None:
    def ctxrag(*args: str) -> tuple[int, str, str]:
        return run_cli(list(args), env, process=process)

    env = _env(tmp_path / "home", "fake")
    corpus = tmp_path / "corpus"
    for rel, text in (("gamma1.txt", "gamma one"), ("beta.md", "# Beta\n\nbeta"), ("a/x.md", "# X\n\nfirst x"),
                      ("b/x.md", "# X\n\nsecond x")):
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text(text + " about a lighthouse.\n", encoding="utf-8")
    code, _, err = ctxrag("ingest", str(corpus), "--kb", "one")
    assert code == 0, err
    for key in ("", "1.txt", "ta.md", "BETA.MD", "eta.md"):
        code, _, err = ctxrag("doc", "delete", key, "--kb", "one")
        assert code == 1 and "no document" in err and "Traceback" not in err, (key, err)
    code, _, err = ctxrag("doc", "delete", "x.md", "--kb", "one")
    assert code == 1 and "matches 2 documents" in err, err
    assert str(corpus / "a" / "x.md") in err and str(corpus / "b" / "x.md") in err
    listed = ctxrag("doc", "list", "--kb", "one")[1]
    assert all(n in listed for n in ("gamma1.txt", "beta.md", "a/x.md", "b/x.md")), listed
    for key in ("beta.md", "a/x.md", str(corpus / "gamma1.txt")):
        code, _, err = ctxrag("doc", "delete", key, "--kb", "one")
        assert code == 0, (key, err)
    listed = ctxrag("doc", "list", "--kb", "one")[1]
    assert "b/x.md" in listed and not any(n in listed for n in ("gamma1.txt", "beta.md", "a/x.md")), listed
