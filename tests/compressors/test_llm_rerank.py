"""LLMReranker: composition tests with fake chat models (pointwise logprobs / grades, listwise windows, every
failure path), and real tests with the local GGUF through llama_cpp.server and in-process (``-m llm``)."""
from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ctxrag.compressors.llm_rerank import LLMReranker, PointwiseScoring, RerankMode, parse_ranking, yes_probability
from ctxrag.testing.llm_server import HANG_GUARD_S


class FunctionChatModel(BaseChatModel):
    """Answers with ``fn(prompt_text, call_kwargs)``; records every call (thread-safe)."""

    fn: Callable[[str, dict[str, Any]], Any]
    calls: list[tuple[str, dict[str, Any]]] = []
    in_flight: int = 0
    peak: int = 0
    delay: float = 0.0
    model_config = {"arbitrary_types_allowed": True}

    @property
    def _llm_type(self) -> str:
        return "function-fake"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        text = "\n".join(str(m.content) for m in messages)
        with _LOCK:
            self.calls.append((text, kwargs))
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            reply = self.fn(text, kwargs)
        finally:
            with _LOCK:
                self.in_flight -= 1
        message = reply if isinstance(reply, AIMessage) else AIMessage(content=str(reply))
        return ChatResult(generations=[ChatGeneration(message=message)])


_LOCK = threading.Lock()

QUERY = "what is the capital of France"
DOCS = [
    Document("Bananas are yellow fruit.", id="banana"),
    Document("Paris is the capital of France.", id="paris"),
    Document("France is a country in Europe.", id="france"),
    Document("Berlin is the capital of Germany.", id="berlin"),
]
GRADES = {"banana": 0, "paris": 10, "france": 6, "berlin": 3}
P_YES = {"banana": 0.02, "paris": 0.97, "france": 0.6, "berlin": 0.2}


def doc_of(prompt: str) -> str:
    for d in DOCS:
        if d.page_content in prompt:
            return d.id
    raise AssertionError(f"no known document in prompt {prompt!r}")


def logprobs_for(p_yes: float, lead: str = "") -> dict[str, Any]:
    entries = []
    if lead:
        entries.append({"token": lead, "logprob": 0.0, "top_logprobs": [{"token": lead, "logprob": 0.0}]})
    top = [
        {"token": "Yes", "logprob": math.log(p_yes * 0.9)},
        {"token": " yes", "logprob": math.log(p_yes * 0.1)},
        {"token": "No", "logprob": math.log(1 - p_yes)},
    ]
    entries.append({"token": "Yes" if p_yes >= 0.5 else "No", "logprob": -0.1, "top_logprobs": top})
    return {"content": entries}


def with_logprobs(prompt: str, kwargs: dict[str, Any]) -> AIMessage:
    assert kwargs.get("logprobs") is True and kwargs.get("top_logprobs") == 5
    p = P_YES[doc_of(prompt)]
    return AIMessage(content="Yes" if p >= 0.5 else "No", response_metadata={"logprobs": logprobs_for(p)})


def grades(prompt: str, kwargs: dict[str, Any]) -> str:
    if "0 (unrelated) to 10" in prompt:
        return f"Score: {GRADES[doc_of(prompt)]}/10"
    return "Yes"  # a yes/no probe without logprobs


def ids(docs) -> list[str]:
    return [d.id for d in docs]


# -- helpers ---------------------------------------------------------------------------------------------------
def test_yes_probability_reads_the_first_answer_token():
    assert yes_probability(logprobs_for(0.8)) == pytest.approx(0.8)
    assert yes_probability(logprobs_for(0.3, lead=" ")) == pytest.approx(0.3)  # blank token skipped
    assert yes_probability(logprobs_for(0.3, lead="“")) == pytest.approx(0.3)  # opening quote skipped
    zh = {"content": [{"token": "是", "logprob": -0.2,
                       "top_logprobs": [{"token": "是", "logprob": math.log(0.75)}, {"token": "否", "logprob": math.log(0.25)}]}]}
    assert yes_probability(zh) == pytest.approx(0.75)
    assert yes_probability({"content": [{"token": "Maybe", "logprob": -0.1, "top_logprobs": []}]}) is None
    assert yes_probability(None) is None and yes_probability({"content": []}) is None


@pytest.mark.parametrize(
    "reply,expected",
    [
        ("[3] > [1] > [2]", [2, 0, 1]),
        ("3, 1, 2", [2, 0, 1]),
        ("[2] > [2] > [9] > [1]", [1, 0, 2]),  # repeats and out-of-range skipped, the missing one appended
        ("Ranking: [3]", [2, 0, 1]),
        ("I cannot rank these.", None),
    ],
)
def test_parse_ranking(reply, expected):
    assert parse_ranking(reply, 3) == expected


def test_modes_from_str():
    assert RerankMode.from_str("LISTWISE") is RerankMode.LISTWISE
    assert PointwiseScoring.from_str("grade") is PointwiseScoring.GRADE
    with pytest.raises(ValueError, match="unknown rerank mode 'pairwise'"):
        LLMReranker(llm=GenericFakeChatModel(messages=iter([])), mode="pairwise")
    with pytest.raises(ValueError, match="unknown pointwise scoring 'vibes'"):
        LLMReranker(llm=GenericFakeChatModel(messages=iter([])), scoring="vibes")


# -- pointwise -------------------------------------------------------------------------------------------------
def test_empty_input_makes_no_call():
    llm = FunctionChatModel(fn=grades, calls=[])
    assert LLMReranker(llm=llm).compress_documents([], QUERY) == []
    assert llm.calls == []


def test_pointwise_logprobs_auto_detected():
    llm = FunctionChatModel(fn=with_logprobs, calls=[])
    out = LLMReranker(llm=llm, top_n=3).compress_documents(DOCS, QUERY)
    assert ids(out) == ["paris", "france", "berlin"]
    assert [d.metadata["rerank_score"] for d in out] == pytest.approx([0.97, 0.6, 0.2])
    assert out[0].metadata["score"] == pytest.approx(0.97)
    assert len(llm.calls) == 4  # the probe is the first document's real call
    assert all("Answer yes or no" in text for text, _ in llm.calls)


def test_pointwise_auto_falls_back_to_grades_without_logprobs():
    llm = FunctionChatModel(fn=grades, calls=[])
    out = LLMReranker(llm=llm, top_n=None).compress_documents(DOCS, QUERY)
    assert ids(out) == ["paris", "france", "berlin", "banana"]
    assert [d.metadata["rerank_score"] for d in out] == pytest.approx([1.0, 0.6, 0.3, 0.0])
    assert len(llm.calls) == 1 + 4  # one probe, then a grade per document


def test_pointwise_forced_logprobs_without_them_reads_the_verdict():
    replies = {"banana": "No.", "paris": "Yes", "france": "yes, partly", "berlin": "no"}
    llm = FunctionChatModel(fn=lambda p, kw: replies[doc_of(p)], calls=[])
    out = LLMReranker(llm=llm, scoring="logprobs", top_n=None).compress_documents(DOCS, QUERY)
    assert ids(out) == ["paris", "france", "banana", "berlin"]  # 1, 1, 0, 0: ties keep the input order
    assert [d.metadata["rerank_score"] for d in out] == [1.0, 1.0, 0.0, 0.0]


def test_pointwise_grade_with_generic_fake_chat_model():
    # GenericFakeChatModel answers in call order, so run one at a time
    llm = GenericFakeChatModel(messages=iter(["2", "9", "I think 5 out of 10", "seven"]))
    out = LLMReranker(llm=llm, scoring="grade", max_concurrency=1, top_n=None).compress_documents(DOCS, QUERY)
    assert ids(out) == ["paris", "france", "banana", "berlin"]  # "seven" is unreadable: last
    assert out[-1].metadata["rerank_score"] is None


def test_pointwise_partial_failure_puts_unscored_last(caplog):
    def flaky(prompt: str, kwargs: dict[str, Any]) -> str:
        if doc_of(prompt) == "paris":
            raise RuntimeError("server hiccup")
        return grades(prompt, kwargs)

    llm = FunctionChatModel(fn=flaky, calls=[])
    with caplog.at_level(logging.WARNING, logger="ctxrag.compressors.llm_rerank"):
        out = LLMReranker(llm=llm, scoring="grade", top_n=None).compress_documents(DOCS, QUERY)
    assert ids(out) == ["france", "berlin", "banana", "paris"]
    assert "could not score 1 of 4" in caplog.text


def test_pointwise_total_failure_keeps_input_order_cut_to_top_n(caplog):
    def down(prompt: str, kwargs: dict[str, Any]) -> str:
        raise ConnectionError("connection refused")

    with caplog.at_level(logging.WARNING, logger="ctxrag.compressors.llm_rerank"):
        out = LLMReranker(llm=FunctionChatModel(fn=down, calls=[]), top_n=2).compress_documents(DOCS, QUERY)
    assert ids(out) == ids(DOCS)[:2]
    assert "keeping the input order" in caplog.text


def test_pointwise_calls_run_concurrently_up_to_the_limit():
    llm = FunctionChatModel(fn=grades, calls=[], delay=0.05)
    LLMReranker(llm=llm, scoring="grade", max_concurrency=3).compress_documents(DOCS * 3, QUERY)
    assert llm.peak == 3


def test_chinese_query_gets_the_chinese_prompt_and_context_is_shown():
    llm = FunctionChatModel(fn=lambda p, kw: "8", calls=[])
    doc = Document("巴黎是法国的首都。", id="zh", metadata={"context": "这段话出自一篇介绍法国的文章。"})
    LLMReranker(llm=llm, scoring="grade").compress_documents([doc], "法国的首都是哪里？")
    prompt = llm.calls[0][0]
    assert "问题：法国的首都是哪里？" in prompt and "只回答数字" in prompt
    assert "这段话出自一篇介绍法国的文章。\n\n巴黎是法国的首都。" in prompt


def test_long_passages_are_cut():
    llm = FunctionChatModel(fn=lambda p, kw: "5", calls=[])
    LLMReranker(llm=llm, scoring="grade", max_chars=100).compress_documents([Document("x" * 5000)], QUERY)
    assert "x" * 100 in llm.calls[0][0] and "x" * 101 not in llm.calls[0][0]


def test_async_pointwise_matches_sync():
    llm = FunctionChatModel(fn=with_logprobs, calls=[])
    out = asyncio.run(LLMReranker(llm=llm, top_n=2).acompress_documents(DOCS, QUERY))
    assert ids(out) == ["paris", "france"]


# -- listwise --------------------------------------------------------------------------------------------------
RELEVANCE = {f"passage number {i:02d}": (i * 37) % 101 for i in range(25)}
MANY = [Document(text, id=text) for text in RELEVANCE]


def oracle(prompt: str, kwargs: dict[str, Any]) -> str:
    """Orders the numbered passages of a listwise prompt by the hidden relevance."""
    shown = re.findall(r"^\[(\d+)\] (passage number \d+)", prompt, flags=re.M)
    ranked = sorted(shown, key=lambda item: RELEVANCE[item[1]], reverse=True)
    return " > ".join(f"[{n}]" for n, _ in ranked)


def test_listwise_sliding_window_brings_the_best_to_the_top():
    llm = FunctionChatModel(fn=oracle, calls=[])
    out = LLMReranker(llm=llm, mode="listwise", window_size=10, step=5, top_n=5).compress_documents(MANY, QUERY)
    best = sorted(RELEVANCE, key=RELEVANCE.get, reverse=True)[:5]
    assert ids(out) == best
    assert len(llm.calls) == 4  # windows 15:25, 10:20, 5:15, 0:10
    assert out[0].metadata["rerank_score"] == 1.0
    assert out[1].metadata["rerank_score"] == pytest.approx(1 - 1 / 25)


def test_listwise_single_window_and_messy_reply():
    llm = FunctionChatModel(fn=lambda p, kw: "Sure! The ranking is [2] > [3], then 1.", calls=[])
    out = LLMReranker(llm=llm, mode="listwise", top_n=None).compress_documents(DOCS, QUERY)
    assert ids(out) == ["paris", "france", "banana", "berlin"]
    assert "[1] Bananas are yellow fruit.\n[2] Paris is the capital of France." in llm.calls[0][0]


def test_listwise_unreadable_replies_keep_input_order(caplog):
    llm = FunctionChatModel(fn=lambda p, kw: "I do not know.", calls=[])
    with caplog.at_level(logging.WARNING, logger="ctxrag.compressors.llm_rerank"):
        out = LLMReranker(llm=llm, mode="listwise", top_n=2).compress_documents(DOCS, QUERY)
    assert ids(out) == ids(DOCS)[:2]
    assert "keeping the input order" in caplog.text


def test_listwise_failed_window_keeps_its_order():
    calls = {"n": 0}

    def second_fails(prompt: str, kwargs: dict[str, Any]) -> str:
        calls["n"] += 1
        if calls["n"] == 2:
            raise TimeoutError("slow")
        return oracle(prompt, kwargs)

    llm = FunctionChatModel(fn=second_fails, calls=[])
    out = LLMReranker(llm=llm, mode="listwise", window_size=10, step=5, top_n=None).compress_documents(MANY, QUERY)
    assert len(out) == 25 and set(ids(out)) == set(RELEVANCE)


def test_listwise_one_document_needs_no_call():
    llm = FunctionChatModel(fn=oracle, calls=[])
    out = LLMReranker(llm=llm, mode="listwise").compress_documents(DOCS[:1], QUERY)
    assert ids(out) == ["banana"] and llm.calls == []


def test_listwise_windows_must_overlap():
    with pytest.raises(ValueError, match="step=10 must be smaller than window_size=10"):
        LLMReranker(llm=GenericFakeChatModel(messages=iter([])), mode="listwise", window_size=10, step=10)


def test_async_listwise_matches_sync():
    llm = FunctionChatModel(fn=oracle, calls=[])
    reranker = LLMReranker(llm=llm, mode="listwise", window_size=10, step=5, top_n=5)
    assert ids(asyncio.run(reranker.acompress_documents(MANY, QUERY))) == ids(reranker.compress_documents(MANY, QUERY))


# -- the real local model --------------------------------------------------------------------------------------
REAL_DOCS = [
    Document("Bananas are a yellow fruit rich in potassium.", id="banana"),
    Document("The Eiffel Tower is in Paris, the capital city of France.", id="paris"),
    Document("Mount Everest is the highest mountain on Earth.", id="everest"),
]


@pytest.mark.llm
def test_real_pointwise_logprobs_through_llama_server(llama_server_url):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=llama_server_url, api_key="not-needed", model="local", temperature=0, max_retries=0,
                     timeout=HANG_GUARD_S)
    out = LLMReranker(llm=llm, top_n=None).compress_documents(REAL_DOCS, "What is the capital of France?")
    scores = {d.id: d.metadata["rerank_score"] for d in out}
    assert all(s is not None and 0.0 <= s <= 1.0 for s in scores.values())
    assert any(0.0 < s < 1.0 for s in scores.values())  # probabilities, not a parsed yes/no
    assert out[0].id == "paris", scores


@pytest.mark.llm
def test_real_pointwise_logprobs_in_process(small_chat_model):
    # the in-process class's own logprobs (the 0.5B: the ranking through the server's 1.5B is the test above)
    out = LLMReranker(llm=small_chat_model, top_n=None).compress_documents(REAL_DOCS, "What is the capital of France?")
    scores = {d.id: d.metadata["rerank_score"] for d in out}
    assert all(s is not None and 0.0 < s < 1.0 for s in scores.values()), scores  # P(yes), not a parsed verdict
    assert out[0].id == "paris", scores


@pytest.mark.llm
def test_real_listwise_through_llama_server(server_chat_model):
    out = LLMReranker(llm=server_chat_model, mode="listwise", top_n=None).compress_documents(
        REAL_DOCS, "What is the highest mountain?"
    )
    assert sorted(ids(out)) == sorted(ids(REAL_DOCS))  # whatever the weak model says, nothing is lost
    # its reply was read as a ranking (measured: Qwen2.5 0.5B echoes the format example "[1] > [2] > [3]", so
    # listwise needs a stronger model; pointwise logprobs is the mode for the local one)
    assert [d.metadata["rerank_score"] for d in out] == pytest.approx([1.0, 2 / 3, 1 / 3])


def test_pointwise_verdict_and_grade_take_structured_output():
    from structured_fake import StructuredFake

    llm = StructuredFake.of({"relevant": "no"}, {"relevant": "yes"}, "no", "maybe")
    out = LLMReranker(llm=llm, scoring="verdict", max_concurrency=1, top_n=None).compress_documents(DOCS, QUERY)
    assert [d.metadata["rerank_score"] for d in out] == [1.0, 0.0, 0.0, None]  # "maybe" is unreadable
    assert llm.schemas[0]["function"]["name"] == "RelevanceVerdict"
    grades = StructuredFake.of({"grade": 2}, {"grade": 9}, "5", {"grade": 3})
    out = LLMReranker(llm=grades, scoring="grade", max_concurrency=1, top_n=None).compress_documents(DOCS, QUERY)
    assert ids(out) == ["paris", "france", "berlin", "banana"]


def test_pointwise_verdict_as_text_when_structured_is_off():
    llm = GenericFakeChatModel(messages=iter(["No.", "Yes, it does.", "no", "yes"]))
    out = LLMReranker(llm=llm, scoring="verdict", max_concurrency=1, top_n=2, structured=False).compress_documents(
        DOCS, QUERY)
    assert ids(out) == ["paris", "berlin"]
