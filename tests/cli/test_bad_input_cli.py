"""The CLI on bad input: a symlink loop, an oversized file, invalid UTF-8, a malformed JSONL line, a file name with a
newline, an all-failed ingest into a new knowledge base, empty and over-long queries, and an empty or
newline-ended ``--kb``. Each gets a one-line error naming the file or value, never a traceback."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxrag.cli.main import app
from ctxrag.kb.local import KnowledgeBase


def run(*args: str, env: dict[str, str] | None = None):  # noqa: ANN201 - click Result
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "falcon.md").write_text("# Falcon\n\nThe Falcon pump moves 40 litres per minute.\n", encoding="utf-8")
    return d


def test_symlink_loop_is_reported_and_the_rest_ingested(corpus: Path) -> None:
    (corpus / "loop.md").symlink_to(corpus / "loop.md")  # a link to itself
    (corpus / "a.md").symlink_to(corpus / "b.md")
    (corpus / "b.md").symlink_to(corpus / "a.md")  # a two-link loop
    r = run("ingest", str(corpus), "--kb", "proj")
    assert r.exit_code == 1 and "Traceback" not in r.output and not isinstance(r.exception, RuntimeError), r.output
    assert "added    " in r.output and "falcon.md" in r.output
    failed = [line for line in r.stdout.splitlines() if line.startswith("failed")]
    assert len(failed) == 3 and all("symbolic link loop" in line for line in failed), r.output
    assert "1 added, 0 updated, 0 skipped, 3 failed" in r.output


def test_file_over_the_size_limit_names_file_and_limit(corpus: Path) -> None:
    (corpus / "big.txt").write_text("word " * 400, encoding="utf-8")  # 2000 bytes
    r = run("ingest", str(corpus), "--kb", "proj", env={"CTXRAG_MAX_FILE_BYTES": "1000"})
    assert r.exit_code == 1
    line = next(line for line in r.stdout.splitlines() if "big.txt" in line)
    assert line.startswith("failed") and "2,000 bytes" in line and "limit of 1,000 bytes" in line
    assert "CTXRAG_MAX_FILE_BYTES" in line and "1 added" in r.output


def test_invalid_utf8_is_reported_not_stored_as_mojibake(corpus: Path) -> None:
    (corpus / "broken.txt").write_bytes(b"The pump moves water \xff\xfe\xfa quietly.\n")
    r = run("ingest", str(corpus), "--kb", "proj")
    assert r.exit_code == 1
    line = next(line for line in r.stdout.splitlines() if "broken.txt" in line)
    assert line.startswith("failed") and "not UTF-8" in line and "offset 21" in line
    docs = json.loads(run("doc", "list", "--kb", "proj", "--json").output)
    assert [Path(d["source"]).name for d in docs] == ["falcon.md"]


def test_malformed_jsonl_line_keeps_the_good_records(tmp_path: Path) -> None:
    path = tmp_path / "faq.jsonl"
    path.write_text('{"text": "The depot opens at nine."}\n{"text": broken\n\n{"text": "Lockers close at six."}\n'
                    "not json at all\n", encoding="utf-8")
    r = run("ingest", str(path), "--kb", "proj")
    assert r.exit_code == 0, r.output
    assert "added" in r.output and "skipped 2 malformed line(s): 2, 5" in r.output
    hits = json.loads(run("search", "when do lockers close", "--kb", "proj", "--mode", "bm25", "--json").output)
    assert any("Lockers close at six." in h["text"] for h in hits)
    assert any("The depot opens at nine." in h["text"] for h in hits)


def test_file_name_with_a_newline_stays_on_one_line(corpus: Path) -> None:
    (corpus / "evil\nadded    forged.md").write_text("# Evil\n\nA file whose name holds a newline.\n", encoding="utf-8")
    r = run("ingest", str(corpus), "--kb", "proj")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()  # (the progress bar goes to stderr)
    assert len(lines) == 3, lines  # two files, one summary: no forged line
    assert any("evil\\nadded    forged.md" in line for line in lines)
    listed = run("doc", "list", "--kb", "proj").stdout.splitlines()
    assert len(listed) == 2 and any("evil\\nadded" in line for line in listed)


def test_all_failed_ingest_leaves_no_new_knowledge_base(tmp_path: Path, corpus: Path) -> None:
    bad = tmp_path / "empty.txt"
    bad.write_text("", encoding="utf-8")
    r = run("ingest", str(bad), "--kb", "fresh")
    assert r.exit_code == 1 and "failed" in r.output and "not created" in r.output
    assert "fresh" not in KnowledgeBase.list_names() and not (Path(run_home()) / "kb" / "fresh").exists()
    # an existing knowledge base is never deleted by a failed ingest
    assert run("ingest", str(corpus), "--kb", "kept").exit_code == 0
    assert run("ingest", str(bad), "--kb", "kept").exit_code == 1
    assert "kept" in KnowledgeBase.list_names()


def run_home() -> str:
    from ctxrag.settings import get_settings

    return str(get_settings().home)


def test_empty_and_overlong_queries_are_errors(corpus: Path) -> None:
    assert run("ingest", str(corpus), "--kb", "proj").exit_code == 0
    for query in ("", "   "):
        r = run("search", query, "--kb", "proj")
        assert r.exit_code == 1 and "need a non-empty query" in r.output and "#1" not in r.output
    r = run("ask", "", "--kb", "proj")
    assert r.exit_code == 1 and "need a non-empty question" in r.output
    r = run("search", "pump " * 30, "--kb", "proj", env={"CTXRAG_MAX_QUERY_CHARS": "100"})
    assert r.exit_code == 1 and "too long (150 characters, limit 100" in r.output
    assert run("search", "pump " * 19, "--kb", "proj", env={"CTXRAG_MAX_QUERY_CHARS": "100"}).exit_code == 0


@pytest.mark.parametrize("args", [("search", "pump", "--kb", ""), ("doc", "list", "--kb", ""),
                                  ("ingest", "IGNORED", "--kb", ""), ("doc", "list", "--kb", "proj\n"),
                                  ("ingest", "IGNORED", "--kb", "proj\n"), ("notes", "add", "a note", "--kb", ""),
                                  ("import", "IGNORED", "--kb", ""), ("chat", "a question", "--kb", "")])
def test_empty_or_newline_kb_name_is_an_error(corpus: Path, args: tuple[str, ...]) -> None:
    args = tuple(str(corpus) if a == "IGNORED" else a for a in args)
    r = run(*args)
    assert r.exit_code == 1 and "invalid knowledge base name" in r.output and "Traceback" not in r.output
    assert KnowledgeBase.list_names() == []  # nothing created under 'general' or 'proj\n'
