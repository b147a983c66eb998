"""Planning context requests (document budget, messages, the max_tokens kwargs) and the contextualizer's tally."""
from __future__ import annotations

import threading

from ctxrag.indexing.contexts.plan import MIN_DOCUMENT_TOKENS, chunk_messages, document_budget, limit_kwargs
from ctxrag.indexing.contexts.report import ContextTally
from ctxrag.prompts.contextual import default_context_prompts

PROMPT = default_context_prompts()["en"]


def test_document_budget_leaves_room_for_prompt_answer_and_margin() -> None:
    words = lambda text: len(text.split())  # noqa: E731
    overhead = words(PROMPT.render_document("") + "\n\n" + PROMPT.render_chunk("Revenue grew 3%."))
    budget = document_budget(PROMPT, "Revenue grew 3%.", n_ctx=4000, max_tokens=128, count_tokens=words)
    assert budget == 4000 - 128 - overhead - (64 + 4000 // 20)
    assert document_budget(PROMPT, "x", n_ctx=100, max_tokens=128, count_tokens=words) == MIN_DOCUMENT_TOKENS
    assert document_budget(PROMPT, "x", n_ctx=100, max_tokens=1, count_tokens=words, max_document_tokens=900) == 900
    assert document_budget(PROMPT, "x", n_ctx=100, max_tokens=1, count_tokens=words, max_document_tokens=1) == 64


def test_messages_share_the_document_prefix() -> None:
    [plain] = chunk_messages("DOC", "CHUNK", anthropic=False)
    assert plain.content == "DOC\n\nCHUNK"
    [blocks] = chunk_messages("DOC", "CHUNK", anthropic=True)
    assert blocks.content[0] == {"type": "text", "text": "DOC", "cache_control": {"type": "ephemeral"}}
    assert blocks.content[1] == {"type": "text", "text": "CHUNK"}


def test_limit_kwargs_sends_plain_max_tokens_to_other_openai_compatible_servers() -> None:
    class ChatOpenAI:  # the check is by class name, as langchain_openai's
        openai_api_base = "http://127.0.0.1:8080/v1"
        extra_body = {"top_k": 5}

    assert limit_kwargs(object(), 64) == {"max_tokens": 64}
    assert limit_kwargs(ChatOpenAI(), 64) == {"max_tokens": 64, "extra_body": {"top_k": 5, "max_tokens": 64}}
    ChatOpenAI.openai_api_base = "https://api.openai.com/v1"
    assert limit_kwargs(ChatOpenAI(), 64) == {"max_tokens": 64}


def test_tally_counts_from_many_threads_and_keeps_the_first_fallback_reason() -> None:
    tally = ContextTally()
    tally.begin(chunks=3, cache_hits=1, windowed=1)
    threads = [threading.Thread(target=tally.count_call) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tally.answered(prompt_tokens=10, completion_tokens=2, reported=True, useless="")
    tally.answered(prompt_tokens=7, completion_tokens=1, reported=False, useless="repeats the chunk")
    tally.fallback("first")
    tally.fallback("second")
    r = tally.report()
    assert (r.documents, r.chunks, r.cache_hits, r.windowed, r.llm_calls) == (1, 3, 1, 1, 50)
    assert (r.prompt_tokens, r.completion_tokens, r.contextualized, r.fallbacks) == (17, 3, 1, 3)
    assert r.usage == "mixed" and r.fallback_reason == "repeats the chunk" and tally.successes == 2
    tally.reset()
    assert tally.report().usage == "none" and tally.report().llm_calls == 0
