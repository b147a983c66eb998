"""Document-level contextual retrieval: ONE LLM call per document writes a short document context (a title line and
2-3 sentences), and every chunk of that document gets it (the "document header" of dsRAG's AutoContext).

Compared with a context per chunk (`Contextualizer`), it costs one call per document instead of one per chunk, so it
stays affordable with a small local model; what it cannot say is where a chunk sits inside its document (combine it
with the title/heading header, see `ctxrag.indexing.contexts.strategies`). It plans one request per document and
hands it to the same `ContextWriter` as the per-chunk contextualizer (cache, retries, fallback, report).

Example::

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from ctxrag.indexing.contexts.document_context import DocumentContextualizer
    fake = GenericFakeChatModel(messages=iter([AIMessage("ACME annual report 2023. Revenue, costs and outlook.")]))
    ctx = DocumentContextualizer(fake, cache=None)
    ctx.contextualize_document("ACME annual report 2023 ... Revenue grew 3%.", ["ACME annual ...", "Revenue grew 3%."])
    # the same context for both chunks, from one call
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable

from ctxrag.indexing.contexts.chunk_context import ContextualizerRunnable, check_language
from ctxrag.indexing.contexts.plan import MIN_DOCUMENT_TOKENS, ContextJob, ContextPlan
from ctxrag.indexing.contexts.cache import ContextCache
from ctxrag.indexing.contexts.report import ContextReport
from ctxrag.indexing.contexts.text import fallback_header
from ctxrag.indexing.contexts.windowing import window_beginning
from ctxrag.indexing.contexts.writer import ContextWriter
from ctxrag.prompts.contextual import DocumentSummaryPrompt, default_document_summary_prompts
from ctxrag.schema import content_hash
from ctxrag.text import detect_language

DOCUMENT_KEY = "__document__"
"""The cache's chunk-hash slot for a whole-document context (never a real sha256)."""


class DocumentContextualizer(ContextualizerRunnable):
    """One context per document (title + 2-3 sentence summary), given to each of its chunks; cached and fail-safe.

    `summary_prompts` by language (see `ctxrag.prompts.contextual.default_document_summary_prompts`); `language`
    'auto' picks 'zh' for mostly-CJK documents; the other keyword arguments go to its `ContextWriter` (cache,
    settings, model_name, max_concurrency, n_ctx, token_counter, max_context_chars, retry_attempts, retry_wait,
    show_progress). A document longer than the model's window is cut to its beginning. The report counts every
    chunk covered, and one LLM call per uncached document.
    """

    def __init__(
        self,
        chat_model: BaseChatModel | Runnable | None = None,
        *,
        summary_prompts: Mapping[str, DocumentSummaryPrompt] | None = None,
        language: Literal["auto", "en", "zh"] = "auto",
        max_tokens: int = 160,
        **writer_options: Any,
    ) -> None:
        self.summary_prompts = dict(summary_prompts) if summary_prompts is not None else default_document_summary_prompts()
        check_language(language, self.summary_prompts, "summary_prompts")
        self.language = language
        self.writer = ContextWriter(chat_model, max_tokens=max_tokens, **writer_options)

    @property
    def cache(self) -> ContextCache | None:
        return self.writer.cache

    @property
    def model_name(self) -> str:
        return self.writer.model_name

    def _summary_prompt(self, document: str) -> DocumentSummaryPrompt:
        lang = detect_language(document) if self.language == "auto" else self.language
        return self.summary_prompts[lang]

    def _plan(self, document: str, title: str) -> ContextPlan:
        """A plan with one slot: the document's context."""
        prompt = self._summary_prompt(document)
        key = (content_hash(document), DOCUMENT_KEY, self.model_name, prompt.version)
        cached = self.cache.get(*key) if self.cache is not None else None
        header = fallback_header(title, "")
        plan = ContextPlan(results=[header if cached == "" else cached])
        if cached is not None:
            return plan
        self.writer.model()  # before windowing: a local model brings its exact tokenizer
        n_ctx, count = self.writer.n_ctx, self.writer.count_tokens
        budget = max(MIN_DOCUMENT_TOKENS, n_ctx - self.writer.max_tokens - count(prompt.render("")) - (64 + n_ctx // 20))
        text, cut = window_beginning(document, budget, count_tokens=count)
        prompt_text = prompt.render(text)
        plan.jobs.append(ContextJob(index=0, key=key, messages=[HumanMessage(content=prompt_text)], fallback=header,
                                    prompt_text=prompt_text, windowed=cut))
        return plan

    def contextualize_document(
        self,
        document_text: str,
        chunks: Sequence[str],
        *,
        title: str = "",
        heading_paths: Sequence[str] | None = None,
        offsets: Sequence[int | None] | None = None,
    ) -> list[str]:
        """The document's context once per chunk, in order (cached, LLM-written, or the title as fallback)."""
        if not chunks:
            return []
        started = time.perf_counter()
        plan = self._plan(document_text, title)
        [context] = self.writer.write(plan, chunks=len(chunks), cache_hits=len(chunks) * plan.known(), title=title,
                                      started=started)
        return [context] * len(chunks)

    async def acontextualize_document(
        self,
        document_text: str,
        chunks: Sequence[str],
        *,
        title: str = "",
        heading_paths: Sequence[str] | None = None,
        offsets: Sequence[int | None] | None = None,
    ) -> list[str]:
        """Async `contextualize_document`."""
        if not chunks:
            return []
        started = time.perf_counter()
        plan = self._plan(document_text, title)
        [context] = await self.writer.awrite(plan, chunks=len(chunks), cache_hits=len(chunks) * plan.known(),
                                             title=title, started=started)
        return [context] * len(chunks)

    def report(self) -> ContextReport:
        """Totals since creation or the last `reset_stats()`."""
        return self.writer.report()

    @property
    def stats(self) -> ContextReport:
        return self.report()

    def reset_stats(self) -> None:
        """Start a new report (e.g. at the start of each ingest)."""
        self.writer.reset()

    def __repr__(self) -> str:
        return f"DocumentContextualizer(model={self.model_name!r}, cache={self.cache!r})"
