"""Planning the LLM requests for a document's chunk contexts: one `ContextJob` per uncached chunk, its messages, and
how much of the document fits the model's window beside the chunk.

Example::

    from ctxrag.indexing.contexts.plan import chunk_messages, document_budget
    from ctxrag.prompts.contextual import default_context_prompts
    prompt = default_context_prompts()["en"]
    document_budget(prompt, "Revenue grew 3%.", n_ctx=4096, max_tokens=128, count_tokens=len)   # tokens for the document
    chunk_messages(prompt.render_document("ACME ..."), prompt.render_chunk("Revenue grew 3%."), anthropic=False)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from ctxrag.indexing.contexts.cache import CacheKey
from ctxrag.prompts.contextual import ContextPrompt

MIN_DOCUMENT_TOKENS = 64
"""The least document text a request carries, however small the window."""


@dataclass
class ContextJob:
    """One LLM request: the context of chunk `index` (cached under `key`; `fallback` is its header)."""

    index: int
    key: CacheKey
    messages: list[BaseMessage]
    fallback: str
    prompt_text: str
    chunk: str = ""
    windowed: bool = False


@dataclass
class ContextPlan:
    """A document's contexts: `results` holds what is known already (cache), `jobs` what the LLM must write."""

    results: list[str | None]
    jobs: list[ContextJob] = field(default_factory=list)

    def known(self) -> int:
        """How many contexts are known already (from the cache)."""
        return sum(r is not None for r in self.results)


def document_budget(
    prompt: ContextPrompt, chunk: str, *, n_ctx: int, max_tokens: int, count_tokens: Callable[[str], int],
    max_document_tokens: int | None = None,
) -> int:
    """Tokens of document text that fit beside `chunk` in an `n_ctx` window with `max_tokens` of answer
    (`max_document_tokens` overrides the computation)."""
    if max_document_tokens is not None:
        return max(MIN_DOCUMENT_TOKENS, max_document_tokens)
    overhead = count_tokens(prompt.render_document("") + "\n\n" + prompt.render_chunk(chunk))
    margin = 64 + n_ctx // 20  # chat template, special tokens, estimate error
    return max(MIN_DOCUMENT_TOKENS, n_ctx - max_tokens - overhead - margin)


def chunk_messages(document_part: str, chunk_part: str, *, anthropic: bool) -> list[BaseMessage]:
    """The request for one chunk: the document part first, so every chunk of a document shares its prefix."""
    if anthropic:  # document first and cached, as in Anthropic's cookbook
        return [HumanMessage(content=[
            {"type": "text", "text": document_part, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": chunk_part},
        ])]  # fmt: skip
    # One string: chat templates of local servers do not all accept content blocks; the prefix stays identical.
    return [HumanMessage(content=f"{document_part}\n\n{chunk_part}")]


def limit_kwargs(model: Any, max_tokens: int) -> dict[str, Any]:
    """`max_tokens` for the call. ChatOpenAI renames it `max_completion_tokens`, which llama_cpp.server ignores,
    so OpenAI-compatible servers other than api.openai.com also get the plain field through `extra_body`."""
    kwargs: dict[str, Any] = {"max_tokens": max_tokens}
    base = getattr(model, "openai_api_base", None)
    if type(model).__name__ == "ChatOpenAI" and base and "api.openai.com" not in base:
        kwargs["extra_body"] = {**(getattr(model, "extra_body", None) or {}), "max_tokens": max_tokens}
    return kwargs
