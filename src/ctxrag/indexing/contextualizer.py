"""Contextual retrieval: an LLM writes a short context situating each chunk in its whole document.

The context is stored in the chunk's metadata and prepended (or appended, see `ctxrag.indexing.placement`) to the
text that is embedded and BM25-indexed; the chunk's own text stays what users see and cite.

Cost control: a persistent cache (`ContextCache`) so unchanged text is never sent twice; for each document the first
chunk's request goes alone (it warms the server's prefix cache with the document), then the rest with bounded
concurrency; retries with exponential backoff; documents over the model's window are windowed around the chunk,
on a fixed grid so that neighbouring chunks get the same window and the model reads it once (`window_document`).
When no LLM is reachable the chunk gets a deterministic header (title > heading path) instead, and the report says so.

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

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from tenacity import AsyncRetrying, Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from tqdm.auto import tqdm

from ctxrag.indexing.context_cache import ContextCache
from ctxrag.indexing.context_plan import ContextJob, ContextPlan, chunk_messages, document_budget, limit_kwargs
from ctxrag.indexing.context_report import ContextReport, ContextTally
from ctxrag.indexing.context_text import clean_context, fallback_header, useless_reason
from ctxrag.indexing.model_info import default_model_name, n_ctx_of, name_of, tokenizer_of
from ctxrag.indexing.retry import is_transient_error, is_unreachable_error
from ctxrag.indexing.windowing import window_document
from ctxrag.prompts.contextual import ContextPrompt, default_context_prompts
from ctxrag.schema import content_hash
from ctxrag.text import detect_language, estimate_tokens

logger = logging.getLogger(__name__)

class Contextualizer(Runnable[dict[str, Any], list[str]]):
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
        if settings is None:
            from ctxrag.settings import get_settings

            settings = get_settings()
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if retry_attempts < 1:
            raise ValueError(f"retry_attempts must be >= 1, got {retry_attempts}")
        if language not in ("auto", "en", "zh"):
            raise ValueError(f"language must be 'auto', 'en' or 'zh', got {language!r}")
        self.settings = settings
        self.prompts = dict(prompts) if prompts is not None else default_context_prompts()
        missing = {"en", "zh"} - set(self.prompts) if language == "auto" else {language} - set(self.prompts)
        if missing:
            raise ValueError(f"prompts lack language(s) {sorted(missing)}; given: {sorted(self.prompts)}")
        self.language = language
        self.cache: ContextCache | None = (
            ContextCache.default(settings) if cache is True else cache if isinstance(cache, ContextCache) else None
        )
        self.max_concurrency = max_concurrency
        self.max_tokens = max_tokens
        self._n_ctx_given = n_ctx
        self.n_ctx = n_ctx or n_ctx_of(chat_model) or int(settings.llm.n_ctx)
        self.max_document_tokens = max_document_tokens
        self.max_context_chars = max_context_chars
        self.retry_attempts = retry_attempts
        self.retry_wait = retry_wait
        self.show_progress = show_progress
        self._model: Runnable | None = None
        self._raw_model = chat_model
        self._model_ready = False
        self.model_name = model_name or name_of(chat_model) or default_model_name(settings)
        self._token_counter = token_counter or tokenizer_of(chat_model) or estimate_tokens
        self._lock = threading.Lock()
        """Guards building the model (once, by the first thread that needs it)."""
        self.tally = ContextTally()

    # ---------------------------------------------------------------- model
    def _get_model(self) -> Runnable | None:
        """The chat model bound to `max_tokens`, built from settings on first use; None when none can be had."""
        if self._model_ready:
            return self._model
        with self._lock:
            if self._model_ready:
                return self._model
            model = self._raw_model
            if model is None:
                if self.settings.llm.provider == "none":
                    self.tally.unreachable = "settings.llm.provider is 'none'"
                else:
                    try:
                        from ctxrag.models.chat import make_chat_model

                        model = make_chat_model(self.settings)
                    except Exception as exc:  # a missing model file must not fail the ingest
                        self.tally.unreachable = f"no chat model ({type(exc).__name__}: {exc})"
                if model is not None and self._token_counter is estimate_tokens:
                    self._token_counter = tokenizer_of(model) or estimate_tokens
                if model is not None and self._n_ctx_given is None:
                    self.n_ctx = n_ctx_of(model) or self.n_ctx
            if model is not None:
                try:
                    model = model.bind(**limit_kwargs(model, self.max_tokens))
                except Exception:  # models without bind kwargs keep their own limit
                    pass
            if self.tally.unreachable:
                logger.warning("contextual retrieval: %s; using title/heading headers as contexts",
                               self.tally.unreachable)
            self._model, self._model_ready = model, True
            return model

    def _is_anthropic(self) -> bool:
        raw = self._raw_model
        return "anthropic" in str(getattr(raw, "_llm_type", "")).lower() if raw is not None else False

    # ---------------------------------------------------------------- planning
    def _prompt_for(self, document: str) -> ContextPrompt:
        lang = detect_language(document) if self.language == "auto" else self.language
        return self.prompts[lang]

    def _document_budget(self, prompt: ContextPrompt, chunk: str) -> int:
        return document_budget(prompt, chunk, n_ctx=self.n_ctx, max_tokens=self.max_tokens,
                               count_tokens=self._token_counter, max_document_tokens=self.max_document_tokens)

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
        self._get_model()  # before windowing: a local model brings its exact tokenizer
        doc_tokens = self._token_counter(document)
        # one budget per document (room beside its longest chunk), so that chunks share aligned windows
        budget = min(self._document_budget(prompt, c) for c in chunks)
        for i, (chunk, key) in enumerate(zip(chunks, keys)):
            if plan.results[i] is not None:
                continue
            text, cut = window_document(
                document, chunk, budget, offset=offsets[i] if offsets else None, index=i, count=len(chunks),
                count_tokens=self._token_counter, document_tokens=doc_tokens, aligned=True,
            )  # fmt: skip
            doc_part, chunk_part = prompt.render_document(text), prompt.render_chunk(chunk)
            plan.jobs.append(ContextJob(
                index=i, key=key, messages=chunk_messages(doc_part, chunk_part, anthropic=self._is_anthropic()),
                fallback=fallback_header(title, heading_paths[i] if heading_paths else ""),
                prompt_text=f"{doc_part}\n\n{chunk_part}", windowed=cut, chunk=chunk,
            ))  # fmt: skip
        return plan

    # ---------------------------------------------------------------- one chunk
    def _retry_predicate(self, exc: BaseException) -> bool:
        # Before any success, "connection refused" means no server: fall back at once instead of retrying.
        if self.tally.successes == 0 and is_unreachable_error(exc):
            return False
        return is_transient_error(exc)

    def _retry_kwargs(self) -> dict[str, Any]:
        return dict(
            stop=stop_after_attempt(self.retry_attempts),
            wait=wait_exponential(multiplier=self.retry_wait, max=30),
            retry=retry_if_exception(self._retry_predicate),
            reraise=True,
        )

    def _finish(self, job: ContextJob, answer: Any | None, exc: BaseException | None) -> str:
        if exc is not None:
            with self.tally.lock:
                if self.tally.successes == 0 and is_unreachable_error(exc) and not self.tally.unreachable:
                    self.tally.unreachable = f"LLM unreachable ({type(exc).__name__}: {exc})"
                    logger.warning(
                        "contextual retrieval: %s; using title/heading headers as contexts for all chunks",
                        self.tally.unreachable,
                    )
                elif not self.tally.unreachable:
                    logger.warning("contextual retrieval: chunk %d failed (%s: %s); using its header",
                                   job.index, type(exc).__name__, exc)  # fmt: skip
            self.tally.fallback(repr(exc)[:300])
            return job.fallback
        text = str(answer.text) if isinstance(answer, BaseMessage) else str(answer or "")
        context = clean_context(text, self.max_context_chars)
        usage = getattr(answer, "usage_metadata", None) or {}
        reported = usage.get("input_tokens") is not None
        useless = useless_reason(context, job.chunk)
        with self.tally.lock:  # one thread at a time counts tokens (a local model's tokenizer)
            self.tally.answered(
                prompt_tokens=int(usage.get("input_tokens") or 0) if reported else self._token_counter(job.prompt_text),
                completion_tokens=int(usage.get("output_tokens") or 0) if reported else self._token_counter(text),
                reported=reported, useless=useless,
            )  # fmt: skip
        if self.cache is not None:  # "" too: the same model and prompt would answer the same, don't ask again
            self.cache.put(*job.key, "" if useless else context)
        return job.fallback if useless else context

    def _fallback(self, job: ContextJob) -> str:
        self.tally.fallback(None)
        return job.fallback

    def _run_sync(self, model: Runnable, job: ContextJob) -> str:
        if self.tally.unreachable:
            return self._fallback(job)
        try:
            for attempt in Retrying(**self._retry_kwargs()):
                with attempt:
                    self.tally.count_call()
                    answer = model.invoke(job.messages)
        except Exception as exc:
            return self._finish(job, None, exc)
        return self._finish(job, answer, None)

    async def _run_async(self, model: Runnable, job: ContextJob) -> str:
        if self.tally.unreachable:
            return self._fallback(job)
        try:
            async for attempt in AsyncRetrying(**self._retry_kwargs()):
                with attempt:
                    self.tally.count_call()
                    answer = await model.ainvoke(job.messages)
        except Exception as exc:
            return self._finish(job, None, exc)
        return self._finish(job, answer, None)

    # ---------------------------------------------------------------- public
    def _begin(self, chunks: Sequence[str], plan: ContextPlan) -> None:
        self.tally.begin(chunks=len(chunks), cache_hits=sum(r is not None for r in plan.results),
                         windowed=sum(job.windowed for job in plan.jobs))

    def _end(self, plan: ContextPlan, done: dict[int, str], started: float) -> list[str]:
        for i, context in done.items():
            plan.results[i] = context
        self.tally.add_seconds(time.perf_counter() - started)
        return [r if r is not None else "" for r in plan.results]

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
        self._begin(chunks, plan)
        done: dict[int, str] = {}
        if plan.jobs:
            model = self._get_model()
            bar = tqdm(total=len(plan.jobs), desc=f"contexts {title}"[:40], disable=not self.show_progress, leave=False)

            def run(job: ContextJob) -> None:
                done[job.index] = self._fallback(job) if model is None else self._run_sync(model, job)
                bar.update(1)

            run(plan.jobs[0])  # alone first: the server caches the document prefix for the others
            if len(plan.jobs) > 1:
                with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
                    list(pool.map(run, plan.jobs[1:]))
            bar.close()
        return self._end(plan, done, started)

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
        self._begin(chunks, plan)
        done: dict[int, str] = {}
        if plan.jobs:
            model = await asyncio.to_thread(self._get_model)
            semaphore = asyncio.Semaphore(self.max_concurrency)

            async def run(job: ContextJob) -> None:
                async with semaphore:
                    done[job.index] = self._fallback(job) if model is None else await self._run_async(model, job)

            await run(plan.jobs[0])
            await asyncio.gather(*(run(job) for job in plan.jobs[1:]))
        return self._end(plan, done, started)

    def report(self) -> ContextReport:
        """Totals since creation or the last `reset_stats()`."""
        return self.tally.report()

    @property
    def stats(self) -> ContextReport:
        return self.report()

    def reset_stats(self) -> None:
        """Start a new report (e.g. at the start of each ingest)."""
        self.tally.reset()

    # ---------------------------------------------------------------- Runnable
    @staticmethod
    def _unpack(input: Mapping[str, Any]) -> tuple[str, list[str], dict[str, Any]]:
        if not isinstance(input, Mapping):
            raise TypeError(f"Contextualizer input must be a dict with 'document' and 'chunks', got {type(input).__name__}")
        for name in ("document", "chunks"):
            if name not in input:
                raise ValueError(f"Contextualizer input lacks {name!r}; got keys {sorted(input)}")
        extra = {k: input[k] for k in ("title", "heading_paths", "offsets") if input.get(k) is not None}
        return str(input["document"]), list(input["chunks"]), extra

    def invoke(self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> list[str]:
        document, chunks, extra = self._unpack(input)
        return self.contextualize_document(document, chunks, **extra)

    async def ainvoke(self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> list[str]:
        document, chunks, extra = self._unpack(input)
        return await self.acontextualize_document(document, chunks, **extra)

    def __repr__(self) -> str:
        return f"Contextualizer(model={self.model_name!r}, cache={self.cache!r}, max_concurrency={self.max_concurrency})"
