"""What the README's command examples need from the CLI: help texts that show ``[n]`` (no markup eats it), and the
shared default knowledge base ``general`` usable before anything was ingested into it."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ctxrag.cli.main import app
from ctxrag.kb.local import KnowledgeBase


def test_help_texts_show_brackets() -> None:
    assert "[n] citations" in CliRunner().invoke(app, ["--help"]).output
    assert "[n] citations" in CliRunner().invoke(app, ["ask", "--help"]).output


def test_the_default_knowledge_base_works_before_it_was_created(tmp_path: Path) -> None:
    (tmp_path / "pump.md").write_text("# Falcon\n\nThe Falcon-7 pump moves 40 litres per minute.\n", encoding="utf-8")
    assert CliRunner().invoke(app, ["ingest", str(tmp_path / "pump.md"), "--kb", "myproject"]).exit_code == 0
    r = CliRunner().invoke(app, ["search", "Falcon pump", "--kb", "myproject", "--kb", "general", "-k", "1"])
    assert r.exit_code == 0, r.output
    assert "pump.md" in r.output
    r = CliRunner().invoke(app, ["search", "Falcon pump"])  # no --kb: the shared `general`, empty
    assert r.exit_code == 0 and "no results" in r.output, r.output
    assert "general" in KnowledgeBase.list_names()
    r = CliRunner().invoke(app, ["search", "Falcon pump", "--kb", "never-made"])
    assert r.exit_code == 1 and "unknown knowledge base 'never-made'" in r.output
