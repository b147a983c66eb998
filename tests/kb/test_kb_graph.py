"""Graph RAG inside a knowledge base (CTXRAG_GRAPH=true): triplets extracted at ingest by the chat model (a scripted
fake here, so the graph is known; the real model's extraction is tested in tests/graph), the graph index persisted in
the generation folders, updated on delete, and `mode="graph"` answering the issue's multi-hop question."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ctxrag.errors import ConfigError, ModelError
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings

from ctxrag.testing.bernoulli import PASSAGES, QUESTION, TRIPLETS


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
    """Issue #8's example with ``graph_rerank="path"`` (chain ranking); the default PageRank ranking puts the two
    first-hop passages (Euler, Johann) before Daniel on this four-passage graph (see the next test)."""
    kb, fake, s = graph_kb
    assert fake.calls == 4 and len(kb.indexes["graph"]) > 0
    kb.settings = s = s.model_copy(update={"graph_rerank": "path"})
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


def test_graph_mode_defaults_to_pagerank(graph_kb) -> None:
    kb, _, _ = graph_kb
    assert kb.settings.graph_rerank == "ppr"
    docs = kb.as_retriever(mode="graph", k=4).invoke(QUESTION)
    assert {d.metadata["graph_rerank"] for d in docs} == {"ppr"}
    assert sorted(_names(docs)) == ["daniel", "euler", "jakob", "johann"]
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True) and scores[0] == 1.0 and scores[-1] > 0
    # full chunks from the knowledge base (with their source), not the graph's copy
    assert all(d.metadata["source"].startswith("wiki://") for d in docs)
    assert _names(docs)[:3].count("daniel") == 1  # third, after the first hop (Euler's and Johann's passages)


def test_graph_rerank_setting_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CTXRAG_GRAPH_RERANK", "embedding")
    assert Settings(home=tmp_path / "h").graph_rerank == "embedding"
    monkeypatch.setenv("CTXRAG_GRAPH_RERANK", "pagerank")
    with pytest.raises(ValueError, match="graph_rerank"):
        Settings(home=tmp_path / "h")


def test_llm_graph_rerank_uses_the_chat_model_or_degrades(graph_kb, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    kb, fake, s = graph_kb
    kb.settings = s.model_copy(update={"graph_rerank": "llm"})
    r = kb.as_retriever(mode="graph", k=2)
    assert r.rerank.value == "llm" and r.llm is fake
    # the scripted model answers with triplets, not a relation list: embedding order, marked as such
    assert {d.metadata["graph_rerank"] for d in r.invoke(QUESTION)} == {"llm-failed"}

    def no_model(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise ModelError("no LLM is configured")

    monkeypatch.setattr("ctxrag.models.chat.make_chat_model", no_model)
    with caplog.at_level("WARNING"):
        r = kb.as_retriever(mode="graph", k=2)
    assert r.rerank.value == "ppr" and "ranking with 'ppr'" in caplog.text


def test_graph_segments_per_commit_answer_like_one_commit_and_merge_check_repair(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One commit per passage writes one graph segment each (`ctxrag.stores.graph.segmented`); the merged graph
    answers as the graph written in one commit, `optimize` merges it to one segment, and a damaged graph segment is
    found by `kb check` and rebuilt by `kb repair`."""
    from ctxrag.kb.maintenance import check, repair

    fake = ScriptedExtractor()
    monkeypatch.setattr("ctxrag.models.chat.make_chat_model", lambda *a, **k: fake)
    s = Settings(home=tmp_path / "h", graph=True)
    texts = [{"text": t, "source": f"wiki://{k}", "title": t.split("\n", 1)[0]} for k, t in PASSAGES.items()]
    kb = KnowledgeBase.open("seg", s)
    for t in texts:
        kb.add_texts([t])
    one = KnowledgeBase.open("one", s)
    one.add_texts(texts)
    doc = json.loads((kb.generations.gen_dir(kb.generation) / "graph" / "segments.json").read_text())
    assert len(doc["segments"]) == len(texts)
    answer = lambda b: [(d.metadata["source"], round(d.metadata.get("score", 0.0), 6))  # noqa: E731
                        for d in b.as_retriever(mode="graph", k=4).invoke(QUESTION)]
    assert answer(kb) == answer(one)
    assert kb.snapshots.optimize()["graph"] == (len(texts), 1)
    assert answer(kb) == answer(one) and check(kb).clean
    seg = json.loads((kb.generations.gen_dir(kb.generation) / "graph" / "segments.json").read_text())["segments"][0]
    (kb.generations.segments_dir / seg["id"] / "graph.json").write_text("{}", encoding="utf-8")
    report = check(kb)
    assert not report.clean and "graph.json" in str(report.differences)
    assert "rebuilt" in repair(kb).actions["graph"]
    assert check(kb).clean and answer(kb) == answer(one)
    kb.close()
    one.close()
