"""Running a document's context requests: the model, retries, the fallback header, the cache and the running report.

Both contextualizers (`Contextualizer`, one context per chunk; `DocumentContextualizer`, one per document) plan their
requests (`ContextPlan`: what the cache knows, and one `ContextJob` per request) and hand the plan to a
`ContextWriter`, which owns everything about asking the model. The first request of a document goes alone (it warms
the server's prefix cache with the document), the rest with bounded concurrency; transient errors are retried with
exponential backoff; when no LLM is reachable each job gets its fallback header, and the report says so.

Example::

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from ctxrag.indexing.contexts.plan import ContextJob, ContextPlan
    from ctxrag.indexing.contexts.writer import ContextWriter
    writer = ContextWriter(GenericFakeChatModel(messages=iter([AIMessage("From ACME's report.")])), cache=None)
    job = ContextJob(index=0, key=("doc", "chunk", "model", "v1"), messages=[HumanMessage("...")], fallback="ACME",
                     prompt_text="...")
    writer.write(ContextPlan(results=[None], jobs=[job]), chunks=1, cache_hits=0, title="ACME")
    # ["From ACME's report."]
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable
from tenacity import AsyncRetrying, Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from tqdm.auto import tqdm

from ctxrag.indexing.contexts.cache import ContextCache
from ctxrag.indexing.contexts.model_info import default_model_name, n_ctx_of, name_of, tokenizer_of
from ctxrag.indexing.contexts.plan import ContextJob, ContextPlan, limit_kwargs
from ctxrag.indexing.contexts.report import ContextReport, ContextTally
from ctxrag.indexing.contexts.retry import is_transient_error, is_unreachable_error
from ctxrag.indexing.contexts.text import clean_context, useless_reason
from ctxrag.text import estimate_tokens

logger = logging.getLogger(__name__)


class ContextWriter:
    """Asks the chat model for the contexts a plan lists; cached and fail-safe (see the module docstring).

    `chat_model`: any LangChain chat model; None builds one from settings (`ctxrag.models.chat.make_chat_model`) on
    first use. `cache`: a `ContextCache`, True for the default one under ``settings.cache_dir``, None/False for none.
    `n_ctx`: the model's window (default: the model's own ``n_ctx``, else ``settings.llm.n_ctx``). Tokens are counted
    with the in-process model's tokenizer when there is one, else estimated (`ctxrag.text.estimate_tokens`) or with
    `token_counter`."""

    def __init__(
        self,
        chat_model: BaseChatModel | Runnable | None = None,
        *,
        settings: Any | None = None,
        cache: ContextCache | bool | None = True,
        model_name: str | None = None,
        max_concurrency: int = 4,
        max_tokens: int = 128,
        n_ctx: int | None = None,
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
        self.settings = settings
        self.cache: ContextCache | None = (
            ContextCache.default(settings) if cache is True else cache if isinstance(cache, ContextCache) else None
        )
        self.max_concurrency = max_concurrency
        self.max_tokens = max_tokens
        self._n_ctx_given = n_ctx
        self.n_ctx = n_ctx or n_ctx_of(chat_model) or int(settings.llm.n_ctx)
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
    def model(self) -> Runnable | None:
        """The chat model bound to `max_tokens`, built from settings on first use; None when none can be had. Call
        it before counting tokens for windowing: a local model brings its exact tokenizer and window."""
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

    def count_tokens(self, text: str) -> int:
        return self._token_counter(text)

    @property
    def is_anthropic(self) -> bool:
        raw = self._raw_model
        return "anthropic" in str(getattr(raw, "_llm_type", "")).lower() if raw is not None else False

    # ---------------------------------------------------------------- one job
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

    # ---------------------------------------------------------------- a plan
    def _begin(self, plan: ContextPlan, chunks: int, cache_hits: int) -> None:
        self.tally.begin(chunks=chunks, cache_hits=cache_hits, windowed=sum(job.windowed for job in plan.jobs))

    def _end(self, plan: ContextPlan, done: dict[int, str], started: float) -> list[str]:
        for i, context in done.items():
            plan.results[i] = context
        self.tally.add_seconds(time.perf_counter() - started)
        return [r if r is not None else "" for r in plan.results]

    def write(self, plan: ContextPlan, *, chunks: int, cache_hits: int, title: str = "",
              started: float | None = None) -> list[str]:
        """`plan.results` with every job's context filled in (LLM-written or its fallback); counts one document of
        `chunks` chunks, `cache_hits` of them from the cache, taking `started` (``time.perf_counter()``) as its
        start. Never raises for LLM failures."""
        started = time.perf_counter() if started is None else started
        self._begin(plan, chunks, cache_hits)
        done: dict[int, str] = {}
        if plan.jobs:
            model = self.model()
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

    async def awrite(self, plan: ContextPlan, *, chunks: int, cache_hits: int, title: str = "",
                     started: float | None = None) -> list[str]:
        """Async `write`: the first job alone, then at most `max_concurrency` requests at a time."""
        started = time.perf_counter() if started is None else started
        self._begin(plan, chunks, cache_hits)
        done: dict[int, str] = {}
        if plan.jobs:
            model = await asyncio.to_thread(self.model)
            semaphore = asyncio.Semaphore(self.max_concurrency)

            async def run(job: ContextJob) -> None:
                async with semaphore:
                    done[job.index] = self._fallback(job) if model is None else await self._run_async(model, job)

            await run(plan.jobs[0])
            await asyncio.gather(*(run(job) for job in plan.jobs[1:]))
        return self._end(plan, done, started)

    def report(self) -> ContextReport:
        """Totals since creation or the last `reset()`."""
        return self.tally.report()

    def reset(self) -> None:
        self.tally.reset()

    def __repr__(self) -> str:
        return f"ContextWriter(model={self.model_name!r}, cache={self.cache!r}, max_concurrency={self.max_concurrency})"
