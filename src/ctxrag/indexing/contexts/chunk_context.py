"""Contextual retrieval: an LLM writes a short context situating each chunk in its whole document.

The context is stored in the chunk's metadata and prepended (or appended, see `ctxrag.indexing.placement`) to the
text that is embedded and BM25-indexed; the chunk's own text stays what users see and cite.

This module plans the requests: a cache lookup per chunk (`ContextCache`), so unchanged text is never sent twice,
and documents over the model's window windowed around the chunk, on a fixed grid so that neighbouring chunks get the
same window and the model reads it once (`window_document`). A `ContextWriter` asks the model: the first request
alone, then bounded concurrency, retries, and a deterministic header (title > heading path) when no LLM is reachable.

Example::

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from ctxrag.indexing import Contextualizer
    fake = GenericFakeChatModel(messages=iter([AIMessage("From ACME's 2023 annual report.")]))
    ctx = Contextualizer(fake, cache=None)
    ctx.contextualize_document("ACME annual report 2023. ... Revenue grew 3%.", ["Revenue grew 3%."], title="ACME")
    # ["From ACME's 2023 annual report."]
    print(ctx.report())
"""
from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableConfig

from ctxrag.indexing.contexts.cache import ContextCache
from ctxrag.indexing.contexts.plan import ContextJob, ContextPlan, chunk_messages, document_budget
from ctxrag.indexing.contexts.report import ContextReport
from ctxrag.indexing.contexts.text import fallback_header
from ctxrag.indexing.contexts.windowing import window_document
from ctxrag.indexing.contexts.writer import ContextWriter
from ctxrag.prompts.contextual import ContextPrompt, default_context_prompts
from ctxrag.schema import content_hash
from ctxrag.text import detect_language


def check_language(language: str, prompts: Mapping[str, Any], what: str = "prompts") -> None:
    """`language` is auto/en/zh and `prompts` cover it (both languages for auto)."""
    if language not in ("auto", "en", "zh"):
        raise ValueError(f"language must be 'auto', 'en' or 'zh', got {language!r}")
    missing = ({"en", "zh"} if language == "auto" else {language}) - set(prompts)
    if missing:
        raise ValueError(f"{what} lack language(s) {sorted(missing)}; given: {sorted(prompts)}")


class ContextualizerRunnable(Runnable[dict[str, Any], list[str]]):
    """A contextualizer as a LangChain `Runnable`: ``{"document", "chunks", "title"?, "heading_paths"?, "offsets"?}``
    -> one context per chunk. Subclasses implement `contextualize_document` and `acontextualize_document`."""

    @abstractmethod
    def contextualize_document(
        self, document_text: str, chunks: Sequence[str], *, title: str = "",
        heading_paths: Sequence[str] | None = None, offsets: Sequence[int | None] | None = None,
    ) -> list[str]: ...

    @abstractmethod
    async def acontextualize_document(
        self, document_text: str, chunks: Sequence[str], *, title: str = "",
        heading_paths: Sequence[str] | None = None, offsets: Sequence[int | None] | None = None,
    ) -> list[str]: ...

    def _unpack(self, input: Mapping[str, Any]) -> tuple[str, list[str], dict[str, Any]]:
        owner = type(self).__name__
        if not isinstance(input, Mapping):
            raise TypeError(f"{owner} input must be a dict with 'document' and 'chunks', got {type(input).__name__}")
        for name in ("document", "chunks"):
            if name not in input:
                raise ValueError(f"{owner} input lacks {name!r}; got keys {sorted(input)}")
        extra = {k: input[k] for k in ("title", "heading_paths", "offsets") if input.get(k) is not None}
        return str(input["document"]), list(input["chunks"]), extra

    def invoke(self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> list[str]:
        document, chunks, extra = self._unpack(input)
        return self.contextualize_document(document, chunks, **extra)

    async def ainvoke(self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> list[str]:
        document, chunks, extra = self._unpack(input)
        return await self.acontextualize_document(document, chunks, **extra)


class Contextualizer(ContextualizerRunnable):
    """Writes one short context per chunk of a document (Anthropic's contextual retrieval), cached and fail-safe.

    `chat_model`: any LangChain chat model; None builds one from settings (`ctxrag.models.chat.make_chat_model`) on
    the first cache miss. `cache`: a `ContextCache`, True for the default one under ``settings.cache_dir``, None/False
    for none. `prompts`: by language ('en', 'zh'); `language`: 'auto' picks 'zh' for mostly-CJK documents.
    `n_ctx`: the model's window (default: the model's own ``n_ctx``, else ``settings.llm.n_ctx``); a document whose
    prompt would not fit with `max_tokens` of answer is windowed around each chunk, on a fixed grid so that
    neighbouring chunks share one window and its evaluated prefix (`max_document_tokens` sets the document budget
    directly). Tokens are counted with the in-process model's tokenizer when there is one, else
    estimated (`ctxrag.text.estimate_tokens`) or with `token_counter`. `max_concurrency` bounds requests in flight
    per document after the first; `retry_attempts` / `retry_wait` drive exponential backoff on transient errors.
    This class plans the requests; its `writer` (`ContextWriter`) runs them and keeps the report.

    Example::

        ctx = Contextualizer()                   # local model, default cache
        contexts = ctx.contextualize_document(text, chunk_texts, title="Handbook", heading_paths=paths)
        print(ctx.report())                      # chunks, cache hits, LLM calls, tokens, fallbacks, seconds
        ctx.invoke({"document": text, "chunks": chunk_texts, "title": "Handbook"})  # the same, as a Runnable
    """

    def __init__(
        self,
        chat_model: BaseChatModel | Runnable | None = None,
        *,
        settings: Any | None = None,
        cache: ContextCache | bool | None = True,
        prompts: Mapping[str, ContextPrompt] | None = None,
        language: Literal["auto", "en", "zh"] = "auto",
        model_name: str | None = None,
        max_concurrency: int = 4,
        max_tokens: int = 128,
        n_ctx: int | None = None,
        max_document_tokens: int | None = None,
        token_counter: Callable[[str], int] | None = None,
        max_context_chars: int = 600,
        retry_attempts: int = 3,
        retry_wait: float = 0.5,
        show_progress: bool = False,
    ) -> None:
        self.prompts = dict(prompts) if prompts is not None else default_context_prompts()
        check_language(language, self.prompts)
        self.language = language
        self.max_document_tokens = max_document_tokens
        self.writer = ContextWriter(
            chat_model, settings=settings, cache=cache, model_name=model_name, max_concurrency=max_concurrency,
            max_tokens=max_tokens, n_ctx=n_ctx, token_counter=token_counter, max_context_chars=max_context_chars,
            retry_attempts=retry_attempts, retry_wait=retry_wait, show_progress=show_progress,
        )  # fmt: skip

    @property
    def cache(self) -> ContextCache | None:
        return self.writer.cache

    @property
    def model_name(self) -> str:
        return self.writer.model_name

    # ---------------------------------------------------------------- planning
    def _prompt_for(self, document: str) -> ContextPrompt:
        lang = detect_language(document) if self.language == "auto" else self.language
        return self.prompts[lang]

    def _document_budget(self, prompt: ContextPrompt, chunk: str) -> int:
        return document_budget(prompt, chunk, n_ctx=self.writer.n_ctx, max_tokens=self.writer.max_tokens,
                               count_tokens=self.writer.count_tokens, max_document_tokens=self.max_document_tokens)

    def _plan(
        self,
        document: str,
        chunks: Sequence[str],
        title: str,
        heading_paths: Sequence[str] | None,
        offsets: Sequence[int | None] | None,
    ) -> ContextPlan:
        if heading_paths is not None and len(heading_paths) != len(chunks):
            raise ValueError(f"heading_paths has {len(heading_paths)} entries for {len(chunks)} chunks")
        if offsets is not None and len(offsets) != len(chunks):
            raise ValueError(f"offsets has {len(offsets)} entries for {len(chunks)} chunks")
        prompt = self._prompt_for(document)
        doc_hash = content_hash(document)
        keys = [(doc_hash, content_hash(c), self.model_name, prompt.version) for c in chunks]
        cached = self.cache.get_many(keys) if self.cache is not None else {}
        plan = ContextPlan(results=[cached.get(k) for k in keys])
        for i, value in enumerate(plan.results):
            if value == "":  # cached "the LLM had nothing to add": the header, without asking again
                plan.results[i] = fallback_header(title, heading_paths[i] if heading_paths else "")
        if all(r is not None for r in plan.results):
            return plan
        self.writer.model()  # before windowing: a local model brings its exact tokenizer
        doc_tokens = self.writer.count_tokens(document)
        # one budget per document (room beside its longest chunk), so that chunks share aligned windows
        budget = min(self._document_budget(prompt, c) for c in chunks)
        for i, (chunk, key) in enumerate(zip(chunks, keys)):
            if plan.results[i] is not None:
                continue
            text, cut = window_document(
                document, chunk, budget, offset=offsets[i] if offsets else None, index=i, count=len(chunks),
                count_tokens=self.writer.count_tokens, document_tokens=doc_tokens, aligned=True,
            )  # fmt: skip
            doc_part, chunk_part = prompt.render_document(text), prompt.render_chunk(chunk)
            plan.jobs.append(ContextJob(
                index=i, key=key, messages=chunk_messages(doc_part, chunk_part, anthropic=self.writer.is_anthropic),
                fallback=fallback_header(title, heading_paths[i] if heading_paths else ""),
                prompt_text=f"{doc_part}\n\n{chunk_part}", windowed=cut, chunk=chunk,
            ))  # fmt: skip
        return plan

    # ---------------------------------------------------------------- public
    def contextualize_document(
        self,
        document_text: str,
        chunks: Sequence[str],
        *,
        title: str = "",
        heading_paths: Sequence[str] | None = None,
        offsets: Sequence[int | None] | None = None,
    ) -> list[str]:
        """One context per chunk, in order (cached, LLM-written, or the fallback header). Never raises for LLM failures.

        `offsets` (the chunks' start offsets in the document) help locate a chunk when the document must be windowed.
        """
        started = time.perf_counter()
        plan = self._plan(document_text, chunks, title, heading_paths, offsets)
        return self.writer.write(plan, chunks=len(chunks), cache_hits=plan.known(), title=title, started=started)

    async def acontextualize_document(
        self,
        document_text: str,
        chunks: Sequence[str],
        *,
        title: str = "",
        heading_paths: Sequence[str] | None = None,
        offsets: Sequence[int | None] | None = None,
    ) -> list[str]:
        """Async `contextualize_document`: the first chunk alone, then at most `max_concurrency` requests at a time."""
        started = time.perf_counter()
        plan = self._plan(document_text, chunks, title, heading_paths, offsets)
        return await self.writer.awrite(plan, chunks=len(chunks), cache_hits=plan.known(), title=title,
                                        started=started)

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
        return (f"Contextualizer(model={self.model_name!r}, cache={self.cache!r}, "
                f"max_concurrency={self.writer.max_concurrency})")
