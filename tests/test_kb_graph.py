"""Graph RAG inside a knowledge base (CTXRAG_GRAPH=true): triplets extracted at ingest by the chat model (a scripted
fake here, so the graph is known; the real model's extraction is tested in tests/graph), the graph index persisted in
the generation folders, updated on delete, and `mode="graph"` answering the issue's multi-hop question."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ctxrag.errors import ConfigError
from ctxrag.knowledge_base import KnowledgeBase
from ctxrag.settings import Settings

sys.path.insert(0, str(Path(__file__).parent / "graph"))
from bernoulli import PASSAGES, QUESTION, TRIPLETS  # noqa: E402


class ScriptedExtractor(BaseChatModel):
    """Answers a triplet-extraction prompt with the hand-written triplets of the passage it contains."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kw):  # type: ignore[override]
        self.calls += 1
        prompt = "\n".join(str(m.content) for m in messages)
        key = next(k for k, text in PASSAGES.items() if text.split("\n", 1)[1][:60] in prompt)
        reply = json.dumps({"triplets": TRIPLETS[key]})
        return ChatResult(generations=[ChatGeneration(message=AIMessage(reply))])


@pytest.fixture
def graph_kb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fake = ScriptedExtractor()
    monkeypatch.setattr("ctxrag.models.chat.make_chat_model", lambda *a, **k: fake)
    s = Settings(home=tmp_path / "h", graph=True)
    kb = KnowledgeBase.open("family", s)
    kb.add_texts([{"text": t, "source": f"wiki://{k}", "title": t.split("\n", 1)[0]} for k, t in PASSAGES.items()])
    return kb, fake, s


def _names(docs):
    return [d.metadata["source"].removeprefix("wiki://") for d in docs]


def test_graph_mode_finds_the_second_hop(graph_kb) -> None:
    kb, fake, s = graph_kb
    assert fake.calls == 4 and len(kb.indexes["graph"]) > 0
    dense = _names(kb.as_retriever(mode="dense", k=2).invoke(QUESTION))
    graph = _names(kb.as_retriever(mode="graph", k=2).invoke(QUESTION))
    assert "daniel" not in dense
    assert "daniel" in graph
    # persisted: a reopened knowledge base answers the same without extracting again
    kb.close()
    kb2 = KnowledgeBase.open("family", s)
    assert _names(kb2.as_retriever(mode="graph", k=2).invoke(QUESTION)) == graph
    assert fake.calls == 4
    kb2.delete_document("wiki://daniel")
    assert "daniel" not in _names(kb2.as_retriever(mode="graph", k=4).invoke(QUESTION))


def test_graph_mode_without_graph_index_is_a_clear_error(tmp_path: Path) -> None:
    kb = KnowledgeBase.open("plain", Settings(home=tmp_path / "h"))
    kb.add_texts([{"text": "Euler was taught by Johann Bernoulli.", "source": "wiki://e"}])
    with pytest.raises(ConfigError, match="CTXRAG_GRAPH=true"):
        kb.as_retriever(mode="graph", k=2)
