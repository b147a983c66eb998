"""Contextualizer: composition with a recording fake model, failure paths, and the real model behind a counting proxy."""
from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

from ctxrag.indexing import ContextCache, Contextualizer, clean_context, fallback_header
from ctxrag.prompts.contextual import CHUNK_CONTEXT_PROMPT, DOCUMENT_CONTEXT_PROMPT, ContextPrompt
from ctxrag.text import estimate_tokens

from ctxrag.testing.llm_server import free_port

DOC = (
    "ACME Corp annual report 2023.\n"
    "Revenue: the company's revenue grew 3% over the previous quarter.\n"
    "Costs: operating costs fell by 2% thanks to a new supplier.\n"
    "Outlook: management expects growth in the Asian market."
)
CHUNKS = [
    "Revenue: the company's revenue grew 3% over the previous quarter.",
    "Costs: operating costs fell by 2% thanks to a new supplier.",
    "Outlook: management expects growth in the Asian market.",
]
HEADINGS = ["Report > Revenue", "Report > Costs", "Report > Outlook"]
ZH_DOC = "华为公司2023年年报。\n营收：公司营收比上一季度增长了3%。\n成本：由于新的供应商，运营成本下降了2%。"
ZH_CHUNKS = ["营收：公司营收比上一季度增长了3%。", "成本：由于新的供应商，运营成本下降了2%。"]


class RecordingChat(BaseChatModel):
    """Answers "Context: about <chunk start>" and records prompts, call times, bound kwargs and concurrency.

    `failures` maps a chunk substring to exceptions raised on its successive attempts."""

    model_name: str = "recording-model"
    delay: float = 0.0
    answer: str | None = None
    failures: dict[str, list[Exception]] = Field(default_factory=dict)
    prompts: list[str] = Field(default_factory=list)
    kwargs_seen: list[dict[str, Any]] = Field(default_factory=list)
    spans: list[tuple[float, float]] = Field(default_factory=list)
    max_in_flight: int = 0
    _in_flight: int = PrivateAttr(default=0)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "recording"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        text = str(messages[-1].content)
        chunk = re.search(r"<chunk>\n(.*?)\n</chunk>", text, re.S).group(1)  # type: ignore[union-attr]
        start = time.perf_counter()
        with self._lock:
            self.prompts.append(text)
            self.kwargs_seen.append(kwargs)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            failure = next((errs.pop(0) for key, errs in self.failures.items() if key in chunk and errs), None)
        try:
            time.sleep(self.delay)
            if failure is not None:
                raise failure
            reply = self.answer if self.answer is not None else f"Context:  about {chunk[:12]}\n"
            return ChatResult(generations=[ChatGeneration(message=AIMessage(reply))])
        finally:
            with self._lock:
                self._in_flight -= 1
                self.spans.append((start, time.perf_counter()))


@pytest.fixture
def cache(tmp_path: Path) -> ContextCache:
    with ContextCache(tmp_path / "contexts.sqlite") as c:
        yield c


def test_contexts_report_and_second_run_from_cache(cache: ContextCache) -> None:
    model = RecordingChat()
    ctx = Contextualizer(model, cache=cache)
    contexts = ctx.contextualize_document(DOC, CHUNKS, title="ACME", heading_paths=HEADINGS)
    assert contexts == [f"about {c[:12]}".strip() for c in CHUNKS]
    report = ctx.report()
    assert (report.documents, report.chunks, report.contextualized, report.llm_calls) == (1, 3, 3, 3)
    assert (report.cache_hits, report.fallbacks, report.windowed) == (0, 0, 0)
    assert report.usage == "estimated" and report.prompt_tokens > 3 * estimate_tokens(DOC)
    assert "3 by the LLM" in str(report)

    again = RecordingChat()
    second = Contextualizer(again, cache=cache)
    assert second.contextualize_document(DOC, CHUNKS, title="ACME") == contexts
    assert again.prompts == []
    assert second.report().cache_hits == 3 and second.report().llm_calls == 0 and second.report().usage == "none"


def test_prompt_is_anthropics_with_document_first(cache: ContextCache) -> None:
    model = RecordingChat()
    Contextualizer(model, cache=cache, max_tokens=77).contextualize_document(DOC, CHUNKS)
    document_part = DOCUMENT_CONTEXT_PROMPT.format(doc_content=DOC)
    assert model.prompts[0] == document_part + "\n\n" + CHUNK_CONTEXT_PROMPT.format(chunk_content=CHUNKS[0])
    assert all(p.startswith(document_part + "\n\nHere is the chunk") for p in model.prompts)
    assert all(k.get("max_tokens") == 77 for k in model.kwargs_seen)


def test_first_chunk_alone_then_bounded_concurrency(cache: ContextCache) -> None:
    chunks = [f"line {i} of the document" for i in range(9)]
    model = RecordingChat(delay=0.05)
    Contextualizer(model, cache=cache, max_concurrency=3).contextualize_document("\n".join(chunks), chunks)
    first_end = min(end for _, end in model.spans)
    assert sorted(start for start, _ in model.spans)[1] >= first_end  # nothing started before the first finished
    assert 1 < model.max_in_flight <= 3


def test_async_first_chunk_alone_then_bounded_concurrency(cache: ContextCache) -> None:
    chunks = [f"line {i} of the document" for i in range(8)]
    model = RecordingChat(delay=0.05)
    ctx = Contextualizer(model, cache=cache, max_concurrency=2)
    contexts = asyncio.run(ctx.acontextualize_document("\n".join(chunks), chunks))
    assert contexts == [f"about {c[:12]}".strip() for c in chunks]
    first_end = min(end for _, end in model.spans)
    assert sorted(start for start, _ in model.spans)[1] >= first_end
    assert model.max_in_flight == 2
    assert asyncio.run(ctx.ainvoke({"document": "\n".join(chunks), "chunks": chunks})) == contexts
    assert ctx.report().cache_hits == 8


def test_chinese_document_gets_chinese_prompt_unless_forced(cache: ContextCache) -> None:
    model = RecordingChat()
    Contextualizer(model, cache=cache).contextualize_document(ZH_DOC, ZH_CHUNKS)
    assert all("请用简短精炼" in p and "Please give" not in p for p in model.prompts)
    forced = RecordingChat()
    Contextualizer(forced, cache=cache, language="en").contextualize_document(ZH_DOC, ZH_CHUNKS)
    assert len(forced.prompts) == 2 and all("Please give a short succinct context" in p for p in forced.prompts)


def test_prompt_version_or_model_change_invalidates(cache: ContextCache) -> None:
    Contextualizer(RecordingChat(), cache=cache).contextualize_document(DOC, CHUNKS)
    same = RecordingChat()
    Contextualizer(same, cache=cache).contextualize_document(DOC, CHUNKS)
    assert same.prompts == []
    custom = {"en": ContextPrompt("<doc>{doc_content}</doc>", "Situate: <chunk>\n{chunk_content}\n</chunk>"),
              "zh": ContextPrompt("<doc>{doc_content}</doc>", "定位：<chunk>\n{chunk_content}\n</chunk>")}  # fmt: skip
    changed = RecordingChat()
    Contextualizer(changed, cache=cache, prompts=custom).contextualize_document(DOC, CHUNKS)
    assert len(changed.prompts) == 3 and changed.prompts[0].startswith("<doc>ACME")
    other_model = RecordingChat(model_name="another-model")
    Contextualizer(other_model, cache=cache).contextualize_document(DOC, CHUNKS)
    assert len(other_model.prompts) == 3


def test_long_document_is_windowed_around_the_chunk(cache: ContextCache) -> None:
    lines = [f"Section {i}: entry {i} of the ledger records a transfer of {i * 7} units." for i in range(3000)]
    document = "\n".join(lines)
    chunk = "\n".join(lines[1500:1503])
    model = RecordingChat()
    ctx = Contextualizer(model, cache=cache, n_ctx=2048, max_tokens=100)
    ctx.contextualize_document(document, [lines[0], chunk], offsets=[0, document.index(chunk)])
    assert ctx.report().windowed == 2
    for prompt, wanted in zip(model.prompts, [lines[0], chunk]):
        sent_document = prompt.split("</document>")[0]
        assert wanted in sent_document
        assert estimate_tokens(prompt) + 100 <= 2048
    assert model.prompts[1].startswith("<document>\n[...]\n") and "\n[...]\n</document>" in model.prompts[1]
    assert model.prompts[0].startswith("<document>\nSection 0:")

    small = RecordingChat()
    Contextualizer(small, cache=None, max_document_tokens=300).contextualize_document(document, [chunk])
    sent = small.prompts[0].split("</document>")[0].removeprefix("<document>\n")
    assert chunk in sent and estimate_tokens(sent) <= 300


def test_neighbouring_chunks_of_a_long_document_share_one_window(cache: ContextCache) -> None:
    # the cost of per-chunk contexts on a long document: each distinct window is a prefix the model evaluates anew
    lines = [f"Section {i}: entry {i} of the ledger records a transfer of {i * 7} units." for i in range(3000)]
    document = "\n".join(lines)
    chunks = ["\n".join(lines[i : i + 3]) for i in range(1500, 1560, 3)]  # 20 neighbouring chunks, ~1 window
    model = RecordingChat()
    ctx = Contextualizer(model, cache=cache, n_ctx=2048, max_tokens=100)
    ctx.contextualize_document(document, chunks, offsets=[document.index(c) for c in chunks])
    # prompts are recorded in the order the writer's threads send them, not in chunk order: pair each with its chunk
    asked = {re.search(r"<chunk>\n(.*?)\n</chunk>", p, re.S).group(1): p.split("</document>")[0] for p in model.prompts}  # type: ignore[union-attr]
    windows = list(asked.values())
    assert sorted(asked) == sorted(chunks) and all(c in w for c, w in asked.items()) and ctx.report().windowed == 20
    assert len(set(windows)) <= 3  # centred windows: 20 different prefixes


def test_transient_error_is_retried(cache: ContextCache) -> None:
    model = RecordingChat(failures={"Costs": [httpx.ReadTimeout("slow"), httpx.ReadTimeout("slow")]})
    ctx = Contextualizer(model, cache=cache, retry_wait=0.0)
    contexts = ctx.contextualize_document(DOC, CHUNKS, heading_paths=HEADINGS)
    assert contexts[1] == "about Costs: opera"
    assert ctx.report().llm_calls == 5 and ctx.report().fallbacks == 0


def test_failed_chunk_gets_header_others_keep_llm_context(cache: ContextCache, caplog: pytest.LogCaptureFixture) -> None:
    model = RecordingChat(failures={"Costs": [ValueError("model crashed")], "Outlook": [httpx.ReadTimeout("x")] * 3})
    ctx = Contextualizer(model, cache=cache, retry_wait=0.0, retry_attempts=3)
    with caplog.at_level(logging.WARNING, logger="ctxrag.indexing.contexts.writer"):
        contexts = ctx.contextualize_document(DOC, CHUNKS, title="ACME", heading_paths=HEADINGS)
    assert contexts == ["about Revenue: the", "ACME > Report > Costs", "ACME > Report > Outlook"]
    report = ctx.report()
    assert report.fallbacks == 2 and report.contextualized == 1 and report.llm_calls == 1 + 1 + 3
    assert "chunk 1 failed (ValueError: model crashed)" in caplog.text
    # fallback headers are not cached: the next run asks the LLM again for those two only
    retry = RecordingChat()
    assert Contextualizer(retry, cache=cache).contextualize_document(DOC, CHUNKS)[1:] == ["about Costs: opera", "about Outlook: man"]
    assert len(retry.prompts) == 2


@pytest.mark.parametrize(
    ("answer", "reason"),
    [("  Context:  ", "empty"), ("Context: the company's revenue grew 3%", "echoed the chunk")],
)
def test_useless_answer_gives_header_and_is_not_asked_again(cache: ContextCache, answer: str, reason: str) -> None:
    ctx = Contextualizer(RecordingChat(answer=answer), cache=cache)
    assert ctx.contextualize_document(DOC, CHUNKS[:1], title="ACME") == ["ACME"]
    assert ctx.report().fallbacks == 1 and reason in (ctx.report().fallback_reason or "")
    again = RecordingChat()
    second = Contextualizer(again, cache=cache)
    assert second.contextualize_document(DOC, CHUNKS[:1], title="ACME 2023", heading_paths=["Revenue"]) == ["ACME 2023 > Revenue"]
    assert again.prompts == [] and second.report().cache_hits == 1


def test_provider_none_falls_back_without_a_model(ctxrag_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXRAG_LLM__PROVIDER", "none")
    from ctxrag.settings import get_settings

    get_settings.cache_clear()
    ctx = Contextualizer()
    assert ctx.contextualize_document(DOC, CHUNKS, title="ACME", heading_paths=HEADINGS) == [f"ACME > {h}" for h in HEADINGS]
    report = ctx.report()
    assert report.fallbacks == 3 and report.llm_calls == 0 and "provider is 'none'" in (report.fallback_reason or "")
    assert (ctxrag_home / "cache" / "contexts.sqlite").is_file()  # default cache location


def test_server_down_falls_back_at_once_for_all_documents(cache: ContextCache, caplog: pytest.LogCaptureFixture) -> None:
    from langchain_openai import ChatOpenAI

    dead = ChatOpenAI(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="sk-secret-never-logged", model="m",
                      max_retries=0, timeout=5)  # fmt: skip
    ctx = Contextualizer(dead, cache=cache, retry_wait=0.0)
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="ctxrag.indexing.contexts.writer"):
        first = ctx.contextualize_document(DOC, CHUNKS, title="ACME", heading_paths=HEADINGS)
        second = ctx.contextualize_document(ZH_DOC, ZH_CHUNKS, title="华为年报")
    assert time.perf_counter() - started < 10
    assert first == [f"ACME > {h}" for h in HEADINGS] and second == ["华为年报", "华为年报"]
    report = ctx.report()
    assert report.fallbacks == 5 and report.llm_calls == 1 and report.contextualized == 0
    assert "unreachable" in (report.fallback_reason or "")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
    assert "sk-secret" not in caplog.text
    assert len(cache) == 0


def test_input_errors(cache: ContextCache) -> None:
    ctx = Contextualizer(RecordingChat(), cache=cache)
    with pytest.raises(ValueError, match="heading_paths has 1 entries for 3 chunks"):
        ctx.contextualize_document(DOC, CHUNKS, heading_paths=["x"])
    with pytest.raises(ValueError, match="offsets has 2 entries for 3 chunks"):
        ctx.contextualize_document(DOC, CHUNKS, offsets=[0, 1])
    with pytest.raises(ValueError, match="lacks 'chunks'"):
        ctx.invoke({"document": DOC})
    with pytest.raises(TypeError, match="must be a dict"):
        ctx.invoke(DOC)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_concurrency must be >= 1, got 0"):
        Contextualizer(RecordingChat(), cache=None, max_concurrency=0)
    with pytest.raises(ValueError, match=r"prompts lack language\(s\) \['zh'\]"):
        Contextualizer(RecordingChat(), cache=None, prompts={"en": ContextPrompt("{doc_content}", "{chunk_content}")})
    with pytest.raises(ValueError, match="language must be"):
        Contextualizer(RecordingChat(), cache=None, language="fr")  # type: ignore[arg-type]
    assert ctx.contextualize_document(DOC, []) == []


def test_runnable_invoke_and_batch(cache: ContextCache) -> None:
    ctx = Contextualizer(RecordingChat(), cache=cache)
    out = ctx.invoke({"document": DOC, "chunks": CHUNKS, "title": "ACME", "heading_paths": HEADINGS})
    assert out == [f"about {c[:12]}".strip() for c in CHUNKS]
    assert ctx.batch([{"document": DOC, "chunks": CHUNKS[:1]}, {"document": ZH_DOC, "chunks": ZH_CHUNKS}])[0] == out[:1]


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Context: The chunk is from ACME.", "The chunk is from ACME."),
        ("上下文：该片段来自华为年报。", "该片段来自华为年报。"),
        ("**Succinct context:**  a\n\n b ", "a b"),
        ('"quoted context"', "quoted context"),
        ("word " * 200, ("word " * 120).strip()),  # 599 characters: the cap cuts between words
    ],
)
def test_clean_context(raw: str, clean: str) -> None:
    assert clean_context(raw, max_chars=600) == clean


def test_fallback_header() -> None:
    assert fallback_header("Handbook", "Setup > Install") == "Handbook > Setup > Install"
    assert fallback_header("Handbook", "") == "Handbook" and fallback_header("", "A") == "A" and fallback_header() == ""


# ----------------------------------------------------------------------------------------- real model


@pytest.mark.llm
def test_second_ingest_makes_no_request_at_the_real_server(
    llm_endpoint_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make_chat_model() -> ChatOpenAI on a counting proxy in front of a real llama_cpp.server."""
    from ctxrag.settings import get_settings

    monkeypatch.setenv("CTXRAG_LLM__TIMEOUT", "600")  # a shared 2-core machine can be very slow
    get_settings.cache_clear()
    docs = [(DOC, CHUNKS[:2]), (ZH_DOC, ZH_CHUNKS)]
    path = tmp_path / "contexts.sqlite"
    with ContextCache(path) as cache:
        ctx = Contextualizer(cache=cache, max_tokens=60, max_concurrency=2)
        first = [ctx.contextualize_document(d, c) for d, c in docs]
        report = ctx.report()
    assert llm_endpoint_env.count == report.llm_calls >= 4
    assert report.contextualized + report.fallbacks == 4
    assert report.usage == "reported" and report.prompt_tokens > 100 and 0 < report.completion_tokens <= 4 * 60
    bodies = llm_endpoint_env.requests
    assert all(b.get("max_tokens") == 60 for b in bodies)  # llama_cpp.server ignores max_completion_tokens
    assert all(len(c) <= 600 for contexts in first for c in contexts)
    prompts = [b["messages"][-1]["content"] for b in bodies]
    assert prompts[0].startswith("<document>\nACME Corp annual report")
    assert prompts[0].endswith("Answer only with the succinct context and nothing else.")
    assert sum("请用简短精炼" in p for p in prompts) >= 2

    llm_endpoint_env.reset()
    with ContextCache(path) as reopened:  # a fresh process would do the same
        again = Contextualizer(cache=reopened, max_tokens=60)
        assert [again.contextualize_document(d, c) for d, c in docs] == first
    assert llm_endpoint_env.count == 0
    assert again.report().cache_hits == 4 and again.report().llm_calls == 0


@pytest.mark.llm
def test_in_process_local_model_reports_usage(small_chat_model: Any) -> None:
    ctx = Contextualizer(small_chat_model, cache=None, max_tokens=40, n_ctx=4096)
    contexts = ctx.contextualize_document(DOC, CHUNKS[:2], title="ACME")
    report = ctx.report()
    assert all(contexts) and report.llm_calls == 2 and report.contextualized + report.fallbacks == 2
    assert report.usage == "reported" and report.prompt_tokens > 2 * estimate_tokens(DOC) // 2
    assert ctx.model_name.endswith(".gguf")


def test_cache_key_model_name_without_building_the_model() -> None:
    from ctxrag.models.gguf import MODEL_FILENAME

    assert Contextualizer(cache=None).model_name == MODEL_FILENAME  # local provider: the GGUF file name
    assert Contextualizer(RecordingChat(), cache=None).model_name == "recording-model"
    assert Contextualizer(RecordingChat(), cache=None, model_name="pinned").model_name == "pinned"
