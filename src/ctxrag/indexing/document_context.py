"""Document-level contextual retrieval: ONE LLM call per document writes a short document context (a title line and
2-3 sentences), and every chunk of that document gets it (the "document header" of dsRAG's AutoContext).

Compared with a context per chunk (`Contextualizer`), it costs one call per document instead of one per chunk, so it
stays affordable with a small local model; what it cannot say is where a chunk sits inside its document (combine it
with the title/heading header, see `ctxrag.indexing.strategies`). Same cache, retries, windowing and fallback as the
per-chunk contextualizer, whose machinery it reuses.

Example::

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from ctxrag.indexing.document_context import DocumentContextualizer
    fake = GenericFakeChatModel(messages=iter([AIMessage("ACME annual report 2023. Revenue, costs and outlook.")]))
    ctx = DocumentContextualizer(fake, cache=None)
    ctx.contextualize_document("ACME annual report 2023 ... Revenue grew 3%.", ["ACME annual ...", "Revenue grew 3%."])
    # the same context for both chunks, from one call
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable

from ctxrag.indexing.context_text import fallback_header
from ctxrag.indexing.context_plan import MIN_DOCUMENT_TOKENS, ContextJob, ContextPlan
from ctxrag.indexing.contextualizer import Contextualizer
from ctxrag.indexing.windowing import window_document
from ctxrag.prompts.contextual import DocumentSummaryPrompt, default_document_summary_prompts
from ctxrag.schema import content_hash
from ctxrag.text import detect_language

DOCUMENT_KEY = "__document__"
"""The cache's chunk-hash slot for a whole-document context (never a real sha256)."""


class DocumentContextualizer(Contextualizer):
    """One context per document (title + 2-3 sentence summary), given to each of its chunks; cached and fail-safe.

    Takes the `Contextualizer` arguments plus `summary_prompts` (by language, see
    `ctxrag.prompts.contextual.default_document_summary_prompts`). A document longer than the model's window is cut
    to its beginning. The report counts every chunk covered, and one LLM call per uncached document.
    """

    def __init__(
        self,
        chat_model: BaseChatModel | Runnable | None = None,
        *,
        summary_prompts: Mapping[str, DocumentSummaryPrompt] | None = None,
        max_tokens: int = 160,
        **kwargs: Any,
    ) -> None:
        super().__init__(chat_model, max_tokens=max_tokens, **kwargs)
        self.summary_prompts = dict(summary_prompts) if summary_prompts is not None else default_document_summary_prompts()
        wanted = {"en", "zh"} if self.language == "auto" else {self.language}
        missing = wanted - set(self.summary_prompts)
        if missing:
            raise ValueError(f"summary_prompts lack language(s) {sorted(missing)}; given: {sorted(self.summary_prompts)}")

    def _summary_prompt(self, document: str) -> DocumentSummaryPrompt:
        lang = detect_language(document) if self.language == "auto" else self.language
        return self.summary_prompts[lang]

    def _plan(
        self,
        document: str,
        chunks: Sequence[str],
        title: str,
        heading_paths: Sequence[str] | None,
        offsets: Sequence[int | None] | None,
    ) -> ContextPlan:
        """A plan with one slot: the document's context."""
        prompt = self._summary_prompt(document)
        key = (content_hash(document), DOCUMENT_KEY, self.model_name, prompt.version)
        cached = self.cache.get(*key) if self.cache is not None else None
        header = fallback_header(title, "")
        plan = ContextPlan(results=[header if cached == "" else cached])
        if cached is not None:
            return plan
        self._get_model()  # before windowing: a local model brings its exact tokenizer
        overhead = self._token_counter(prompt.render(""))
        budget = max(MIN_DOCUMENT_TOKENS, self.n_ctx - self.max_tokens - overhead - (64 + self.n_ctx // 20))
        text, cut = window_document(document, document[:200], budget, offset=0, count_tokens=self._token_counter)
        prompt_text = prompt.render(text)
        plan.jobs.append(ContextJob(index=0, key=key, messages=[HumanMessage(content=prompt_text)], fallback=header,
                                    prompt_text=prompt_text, windowed=cut))
        return plan

    def _spread(self, context: str, chunks: Sequence[str], hits_before: int) -> list[str]:
        """The one context for every chunk; the report counts all chunks (the parent counted the document once)."""
        with self.tally.lock:
            cached = self.tally.stats.cache_hits > hits_before
            self.tally.stats.chunks += len(chunks) - 1
            self.tally.stats.cache_hits += (len(chunks) - 1) if cached else 0
        return [context] * len(chunks)

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
        before = self.report().cache_hits
        [context] = super().contextualize_document(document_text, [document_text[:200]], title=title)
        return self._spread(context, chunks, before)

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
        before = self.report().cache_hits
        [context] = await super().acontextualize_document(document_text, [document_text[:200]], title=title)
        return self._spread(context, chunks, before)

    def __repr__(self) -> str:
        return f"DocumentContextualizer(model={self.model_name!r}, cache={self.cache!r})"
