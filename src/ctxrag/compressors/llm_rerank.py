"""Reranking with a chat model: pointwise relevance (P(yes) from token logprobs, or a parsed 0-10 grade) or listwise
ordering of a numbered list (RankGPT-style sliding window, back to front).

Works with the local GGUF model and any OpenAI-compatible endpoint: logprobs are asked for with
``.bind(logprobs=True, top_logprobs=k)`` and read from ``response_metadata["logprobs"]`` (OpenAI's format).
A small model fails often, so every failure degrades: a document the model could not score sorts after the scored
ones in its input position; when nothing could be scored the input order comes back, all of it, with a warning.

Example::

    from ctxrag.compressors.llm_rerank import LLMReranker
    from ctxrag.models.chat import make_chat_model
    reranker = LLMReranker(llm=make_chat_model(), mode="pointwise", top_n=5)
    reranker.compress_documents(docs, "what is contextual retrieval?")
"""
from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.runnables import Runnable
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ctxrag.enums import ChoiceEnum
from ctxrag.models.parsing import parse_number, parse_yes_no
from ctxrag.models.structured import StructuredReply, structured_runnable
from ctxrag.prompts.rerank import numbered_passages, rerank_prompt, rerank_text
from ctxrag.schema import SCORE

log = logging.getLogger(__name__)

RERANK_SCORE = "rerank_score"
_YES_TOKENS = {"yes", "y", "true", "是", "相关", "对"}
_NO_TOKENS = {"no", "n", "false", "否", "不", "不是", "不相关"}
_PUNCT = " \t\r\n\"'`“”‘’「」.,:;!?。，：；！？*()[]（）【】"


class RerankMode(ChoiceEnum):
    """How the model judges relevance."""

    __label__ = "rerank mode"

    POINTWISE = "pointwise"
    """One call per document: P(yes) from logprobs, or a 0-10 grade."""
    LISTWISE = "listwise"
    """The model orders numbered passages; windows of ``window_size`` slide from the back of the list to the front."""


class PointwiseScoring(ChoiceEnum):
    """Where a pointwise score comes from."""

    __label__ = "pointwise scoring"

    AUTO = "auto"
    """Logprobs if the first answer carries them, else grades."""
    LOGPROBS = "logprobs"
    """P(yes) / (P(yes) + P(no)) of the first answer token; a reply without logprobs scores 1 or 0 by its text."""
    GRADE = "grade"
    """A 0-10 grade (a `RelevanceGrade` through structured output, else parsed from the reply), divided by 10."""
    VERDICT = "verdict"
    """A yes/no verdict (a `RelevanceVerdict` through structured output, else the reply's first word): 1 or 0."""


class RelevanceVerdict(BaseModel):
    """A pointwise yes/no reply (structured-output schema)."""

    relevant: Literal["yes", "no"]


class RelevanceGrade(BaseModel):
    """A pointwise 0-10 grade (structured-output schema)."""

    grade: Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]


def _norm_token(token: str) -> str:
    return token.strip(_PUNCT).lower()


def yes_probability(logprobs: Any) -> float | None:
    """P(yes) / (P(yes) + P(no)) at the first non-blank answer token of an OpenAI-format logprobs block, or None."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    for entry in content:
        if not isinstance(entry, dict) or not _norm_token(str(entry.get("token", ""))):
            continue  # leading whitespace or an opening quote
        candidates = entry.get("top_logprobs") or [entry]
        p_yes = p_no = 0.0
        for cand in candidates:
            word = _norm_token(str(cand.get("token", "")))
            lp = cand.get("logprob")
            if not isinstance(lp, (int, float)) or not math.isfinite(lp):
                continue
            if word in _YES_TOKENS:
                p_yes += math.exp(lp)
            elif word in _NO_TOKENS:
                p_no += math.exp(lp)
        return p_yes / (p_yes + p_no) if p_yes + p_no > 0 else None
    return None


def parse_ranking(text: str, n: int) -> list[int] | None:
    """0-based order of ``n`` passages from a reply like ``[3] > [1] > [2]`` (or ``3, 1, 2``).

    Out-of-range and repeated numbers are skipped; passages the reply leaves out follow in their given order.
    None when the reply names no passage at all.
    """
    numbers = re.findall(r"\[(\d+)\]", text) or re.findall(r"\d+", text)
    order: list[int] = []
    for raw in numbers:
        i = int(raw) - 1
        if 0 <= i < n and i not in order:
            order.append(i)
    if not order:
        return None
    return order + [i for i in range(n) if i not in order]


def _text_of(message: Any) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, list):  # content blocks
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


class LLMReranker(BaseDocumentCompressor):
    """Rerank documents with a chat model; sets ``rerank_score`` (in [0, 1]) and ``score``.

    Example::

        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        llm = GenericFakeChatModel(messages=iter(["2", "9"]))
        LLMReranker(llm=llm, scoring="grade", max_concurrency=1).compress_documents(
            [Document("Bananas are yellow."), Document("Paris is the capital of France.")], "capital of France")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    llm: Runnable
    """A chat model (`BaseChatModel`), e.g. from `ctxrag.models.chat.make_chat_model`."""
    mode: RerankMode = RerankMode.POINTWISE
    scoring: PointwiseScoring = PointwiseScoring.AUTO
    """Pointwise only: logprobs, grade, or auto-detect."""
    top_n: int | None = Field(default=20, ge=1)
    """How many documents to return (None: all, reordered)."""
    language: Literal["auto", "zh", "en"] = "auto"
    """Prompt language; auto follows the query."""
    max_concurrency: int = Field(default=4, ge=1)
    """Pointwise calls in flight at once."""
    max_chars: int | None = Field(default=None, ge=50)
    """Characters of each passage shown to the model (None: 1500 pointwise, 400 listwise)."""
    include_context: bool = True
    """Show a chunk's contextual-retrieval context before its text."""
    window_size: int = Field(default=10, ge=2)
    """Listwise: passages per call."""
    step: int = Field(default=5, ge=1)
    """Listwise: how far the window moves towards the front after each call."""
    top_logprobs: int = Field(default=5, ge=1, le=20)
    structured: bool = True
    """Grades and verdicts through ``with_structured_output`` (grammar-constrained on the local model); the reply's
    text is parsed when this is off or the model has no structured output."""

    @field_validator("mode", mode="before")
    @classmethod
    def _parse_mode(cls, value: Any) -> RerankMode:
        return RerankMode.from_str(value)

    @field_validator("scoring", mode="before")
    @classmethod
    def _parse_scoring(cls, value: Any) -> PointwiseScoring:
        return PointwiseScoring.from_str(value)

    @model_validator(mode="after")
    def _windows_overlap(self) -> LLMReranker:
        if self.step >= self.window_size:
            raise ValueError(
                f"step={self.step} must be smaller than window_size={self.window_size}: windows must overlap "
                "for good passages to move towards the front"
            )
        return self

    # -- shared ----------------------------------------------------------------------------------------------------
    def _texts(self, documents: Sequence[Document]) -> list[str]:
        limit = self.max_chars or (400 if self.mode is RerankMode.LISTWISE else 1500)
        return [rerank_text(d, self.include_context, limit) for d in documents]

    def _chain(self, kind: str, query: str, **bind: Any) -> Runnable:
        return rerank_prompt(kind, self.language, query) | self.llm.bind(**bind)

    def _config(self, callbacks: Callbacks) -> dict[str, Any]:
        return {"callbacks": callbacks, "max_concurrency": self.max_concurrency}

    def _finish(self, documents: Sequence[Document], scores: list[float | None]) -> list[Document]:
        if all(s is None for s in scores):
            log.warning("LLM reranking scored none of %d documents; keeping the input order", len(documents))
            return list(documents)[: self.top_n] if self.top_n is not None else list(documents)
        missing = sum(s is None for s in scores)
        if missing:
            log.warning("LLM reranking could not score %d of %d documents; they follow the scored ones",
                        missing, len(documents))
        order = sorted(range(len(documents)), key=lambda i: (scores[i] is None, -(scores[i] or 0.0)))
        if self.top_n is not None:
            order = order[: self.top_n]
        out = []
        for i in order:
            meta = dict(documents[i].metadata)
            meta[RERANK_SCORE] = scores[i]
            if scores[i] is not None:
                meta[SCORE] = scores[i]
            out.append(Document(page_content=documents[i].page_content, metadata=meta, id=documents[i].id))
        return out

    # -- pointwise -------------------------------------------------------------------------------------------------
    def _logprob_score(self, reply: Any) -> float | None:
        if isinstance(reply, BaseException):
            return None
        p = yes_probability(getattr(reply, "response_metadata", {}).get("logprobs"))
        if p is not None:
            return p
        verdict = parse_yes_no(_text_of(reply))
        return None if verdict is None else float(verdict)

    @staticmethod
    def _grade_score(reply: StructuredReply | BaseException) -> float | None:
        if isinstance(reply, BaseException):
            return None
        if isinstance(reply.parsed, RelevanceGrade):
            return reply.parsed.grade / 10.0
        grade = parse_number(reply.text, 0, 10)
        return None if grade is None else grade / 10.0

    @staticmethod
    def _verdict_score(reply: StructuredReply | BaseException) -> float | None:
        if isinstance(reply, BaseException):
            return None
        if isinstance(reply.parsed, RelevanceVerdict):
            return float(reply.parsed.relevant == "yes")
        verdict = parse_yes_no(reply.text)
        return None if verdict is None else float(verdict)

    def _structured_chain(self, kind: str, query: str) -> Runnable:
        """The grade or verdict prompt piped into the model, returning `StructuredReply`."""
        schema: type[BaseModel] = RelevanceGrade if kind == "grade" else RelevanceVerdict
        # a JSON reply needs a few more tokens than the bare word or number
        limit = (12 if kind == "grade" else 10) if self.structured else (4 if kind == "grade" else 3)
        return rerank_prompt(kind, self.language, query) | structured_runnable(
            self.llm, schema, max_tokens=limit, structured=self.structured)

    @staticmethod
    def _has_logprobs(reply: Any) -> bool:
        return yes_probability(getattr(reply, "response_metadata", {}).get("logprobs")) is not None

    def _pointwise(self, documents: Sequence[Document], query: str, callbacks: Callbacks) -> list[float | None]:
        inputs = [{"query": query, "document": t} for t in self._texts(documents)]
        config = self._config(callbacks)
        yes_no = self._chain("yes_no", query, logprobs=True, top_logprobs=self.top_logprobs, max_tokens=3)
        if self.scoring is PointwiseScoring.VERDICT:
            verdict = self._structured_chain("yes_no", query)
            return [self._verdict_score(r) for r in verdict.batch(inputs, config, return_exceptions=True)]
        if self.scoring is PointwiseScoring.GRADE:
            grade = self._structured_chain("grade", query)
            return [self._grade_score(r) for r in grade.batch(inputs, config, return_exceptions=True)]
        if self.scoring is PointwiseScoring.AUTO:
            first = yes_no.batch(inputs[:1], config, return_exceptions=True)[0]
            if not self._has_logprobs(first):
                log.info("chat model gave no usable logprobs; scoring with 0-10 grades")
                grade = self._structured_chain("grade", query)
                return [self._grade_score(r) for r in grade.batch(inputs, config, return_exceptions=True)]
            replies = [first, *yes_no.batch(inputs[1:], config, return_exceptions=True)] if inputs[1:] else [first]
        else:
            replies = yes_no.batch(inputs, config, return_exceptions=True)
        return [self._logprob_score(r) for r in replies]

    async def _apointwise(self, documents: Sequence[Document], query: str, callbacks: Callbacks) -> list[float | None]:
        inputs = [{"query": query, "document": t} for t in self._texts(documents)]
        config = self._config(callbacks)
        yes_no = self._chain("yes_no", query, logprobs=True, top_logprobs=self.top_logprobs, max_tokens=3)
        if self.scoring is PointwiseScoring.VERDICT:
            verdict = self._structured_chain("yes_no", query)
            return [self._verdict_score(r) for r in await verdict.abatch(inputs, config, return_exceptions=True)]
        grade = self._structured_chain("grade", query)
        if self.scoring is PointwiseScoring.GRADE:
            return [self._grade_score(r) for r in await grade.abatch(inputs, config, return_exceptions=True)]
        if self.scoring is PointwiseScoring.AUTO:
            first = (await yes_no.abatch(inputs[:1], config, return_exceptions=True))[0]
            if not self._has_logprobs(first):
                log.info("chat model gave no usable logprobs; scoring with 0-10 grades")
                return [self._grade_score(r) for r in await grade.abatch(inputs, config, return_exceptions=True)]
            rest = await yes_no.abatch(inputs[1:], config, return_exceptions=True) if inputs[1:] else []
            replies = [first, *rest]
        else:
            replies = await yes_no.abatch(inputs, config, return_exceptions=True)
        return [self._logprob_score(r) for r in replies]

    # -- listwise --------------------------------------------------------------------------------------------------
    def _windows(self, n: int) -> list[tuple[int, int]]:
        """(start, end) windows from the back of the list to the front, so good passages bubble up."""
        spans: list[tuple[int, int]] = []
        end = n
        while True:
            start = max(0, end - self.window_size)
            spans.append((start, end))
            if start == 0:
                return spans
            end -= self.step

    def _window_input(self, query: str, texts: list[str], order: list[int], start: int, end: int) -> dict[str, Any]:
        segment = [texts[i] for i in order[start:end]]
        return {"query": query, "passages": numbered_passages(segment), "n": len(segment)}

    def _apply(self, order: list[int], start: int, end: int, reply: Any) -> bool:
        segment = order[start:end]
        if isinstance(reply, BaseException):
            log.debug("listwise window %d:%d failed: %s", start, end, reply)
            return False
        ranking = parse_ranking(_text_of(reply), len(segment))
        if ranking is None:
            return False
        order[start:end] = [segment[j] for j in ranking]
        return True

    def _listwise_scores(self, order: list[int], ok: int, n: int) -> list[float | None]:
        if ok == 0:
            return [None] * n
        scores: list[float | None] = [None] * n
        for position, i in enumerate(order):
            scores[i] = 1.0 - position / n
        return scores

    def _listwise(self, documents: Sequence[Document], query: str, callbacks: Callbacks) -> list[float | None]:
        if len(documents) == 1:
            return [1.0]
        texts = self._texts(documents)
        order = list(range(len(documents)))
        chain = self._chain("listwise", query, max_tokens=8 * self.window_size)
        ok = 0
        for start, end in self._windows(len(order)):
            try:
                reply: Any = chain.invoke(self._window_input(query, texts, order, start, end), {"callbacks": callbacks})
            except Exception as exc:  # noqa: BLE001 - a failed window keeps its order
                reply = exc
            ok += self._apply(order, start, end, reply)
        return self._listwise_scores(order, ok, len(order))

    async def _alistwise(self, documents: Sequence[Document], query: str, callbacks: Callbacks) -> list[float | None]:
        if len(documents) == 1:
            return [1.0]
        texts = self._texts(documents)
        order = list(range(len(documents)))
        chain = self._chain("listwise", query, max_tokens=8 * self.window_size)
        ok = 0
        for start, end in self._windows(len(order)):  # windows depend on each other: one at a time
            try:
                reply: Any = await chain.ainvoke(
                    self._window_input(query, texts, order, start, end), {"callbacks": callbacks}
                )
            except Exception as exc:  # noqa: BLE001
                reply = exc
            ok += self._apply(order, start, end, reply)
        return self._listwise_scores(order, ok, len(order))

    # -- BaseDocumentCompressor ------------------------------------------------------------------------------------
    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Rerank ``documents`` for ``query``; best first, at most ``top_n``."""
        if not documents:
            return []
        if self.mode is RerankMode.LISTWISE:
            scores = self._listwise(documents, query, callbacks)
        else:
            scores = self._pointwise(documents, query, callbacks)
        return self._finish(documents, scores)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Async `compress_documents`; pointwise calls run concurrently (``max_concurrency``)."""
        if not documents:
            return []
        if self.mode is RerankMode.LISTWISE:
            scores = await self._alistwise(documents, query, callbacks)
        else:
            scores = await self._apointwise(documents, query, callbacks)
        return self._finish(documents, scores)
