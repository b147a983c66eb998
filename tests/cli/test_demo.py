"""`ctxrag demo` from any folder: the sample corpus and questions come from the package, and a demo that fails leaves
no knowledge base behind (a chat endpoint that is down, a bad questions file), while one that existed before stays."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxrag.cli.main import app
from ctxrag.cli.query import read_questions
from ctxrag.errors import CtxragError
from ctxrag.kb.local import KnowledgeBase
from ctxrag.resource_paths import demo_questions
from ctxrag.testing.llm_server import free_port


def _down_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chat endpoint on 127.0.0.1 where nothing listens: the first answer fails after the ingest."""
    monkeypatch.setenv("CTXRAG_LLM__PROVIDER", "openai")
    monkeypatch.setenv("CTXRAG_LLM__BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    monkeypatch.setenv("CTXRAG_LLM__MAX_RETRIES", "0")
    from ctxrag.settings import get_settings

    get_settings.cache_clear()


def test_shipped_questions_are_readable() -> None:
    questions = read_questions(demo_questions())
    assert len(questions) == 6 and "星河知识库支持哪些文件格式？" in questions


def test_bad_questions_file_fails_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "q.json").write_text('{"question": "not a list"}', encoding="utf-8")
    r = CliRunner().invoke(app, ["demo", "--questions", str(tmp_path / "q.json")])
    assert r.exit_code == 1 and "expected a non-empty JSON list" in r.output
    assert KnowledgeBase.list_names() == []
    with pytest.raises(CtxragError, match="item 1 has no question text"):
        (tmp_path / "q2.json").write_text('["ok?", {"answer": "x"}]', encoding="utf-8")
        read_questions(tmp_path / "q2.json")


@pytest.mark.slow
def test_a_demo_that_fails_midway_removes_its_knowledge_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _down_endpoint(monkeypatch)
    monkeypatch.chdir(tmp_path)  # not the repository: the corpus comes from the package
    r = CliRunner().invoke(app, ["demo"])
    assert r.exit_code == 1, r.output
    assert "ingested" in r.output and "6 added" in r.output  # it failed after the ingest, at the first answer
    assert "knowledge base 'demo' removed again" in r.output
    assert "demo" not in KnowledgeBase.list_names()
    # a knowledge base that existed before the demo is the user's: a failing demo leaves it alone
    (tmp_path / "note.md").write_text("# Note\n\nA note of mine.\n", encoding="utf-8")
    assert CliRunner().invoke(app, ["ingest", str(tmp_path / "note.md"), "--kb", "mine"]).exit_code == 0
    r = CliRunner().invoke(app, ["demo", "--kb", "mine"])
    assert r.exit_code == 1 and "mine" in KnowledgeBase.list_names()


@pytest.mark.llm
@pytest.mark.slow
def test_demo_answers_from_any_folder_with_the_local_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           llm_endpoint_env) -> None:  # noqa: ANN001 - CountingURL
    """The whole demo, one question, answered by the real 1.5B through the run's ``llama_cpp.server`` (its reply
    recorded and replayed, so the run loads no model for it); the in-process model the demo picks by default is named
    the same way (`describe_model`, nothing loaded)."""
    from ctxrag.cli.query import describe_model
    from ctxrag.models.chat import make_chat_model
    from ctxrag.settings import get_settings
    from ctxrag.testing.llm_server import SERVER_MODEL_ALIAS

    default = make_chat_model(get_settings(), warm=True, provider="local")  # the local GGUF: not loaded until called
    assert describe_model(default).startswith("the local model qwen2.5-coder-1.5b-instruct")
    assert "(in-process llama.cpp;" in describe_model(default)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXRAG_LLM__MAX_TOKENS", "48")
    get_settings.cache_clear()
    (tmp_path / "one.json").write_text(json.dumps([{"question": "星河知识库的默认端口是多少？"}], ensure_ascii=False),
                                       encoding="utf-8")
    r = CliRunner().invoke(app, ["demo", "--questions", str(tmp_path / "one.json")])
    assert r.exit_code == 0, r.output
    assert "6 added" in r.output and f"answering with {SERVER_MODEL_ALIAS} at {llm_endpoint_env}" in r.output
    assert "Sources" in r.output and llm_endpoint_env.count >= 1  # the answer came from the real model
    assert "demo" in KnowledgeBase.list_names()
