"""What contextualizing a batch of documents cost: chunks, cache hits, LLM calls, tokens, fallbacks, time; and the
thread-safe tally a contextualizer keeps of it.

Example::

    from ctxrag.indexing.contexts.report import ContextReport
    print(ContextReport(documents=1, chunks=3, contextualized=3, llm_calls=3))
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Literal


def _usage(kinds: set[str]) -> str:
    """'none' for no token counts, the one kind they share, else 'mixed'."""
    return "none" if not kinds else ("mixed" if len(kinds) > 1 else next(iter(kinds)))


@dataclass
class ContextReport:
    """What contextualizing cost. `usage` says whether token counts came from the model ('reported'), were estimated
    from the text ('estimated'), both ('mixed') or there were no calls ('none')."""

    documents: int = 0
    chunks: int = 0
    contextualized: int = 0
    """Chunks whose context the LLM wrote in this run."""
    cache_hits: int = 0
    llm_calls: int = 0
    """Requests sent, retries included."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage: Literal["reported", "estimated", "mixed", "none"] = "none"
    fallbacks: int = 0
    """Chunks given the deterministic header because the LLM failed or was unreachable."""
    windowed: int = 0
    """Chunks whose document was cut to a window because it exceeded the model's context."""
    seconds: float = 0.0
    fallback_reason: str | None = None

    def __str__(self) -> str:
        text = (
            f"contexts: {self.chunks} chunks in {self.documents} documents, {self.contextualized} by the LLM "
            f"({self.llm_calls} calls), {self.cache_hits} cached, {self.fallbacks} fallback headers, "
            f"{self.windowed} windowed; tokens: {self.prompt_tokens} prompt + {self.completion_tokens} completion "
            f"({self.usage}); {self.seconds:.1f}s"
        )
        return text + (f"; fallback because: {self.fallback_reason}" if self.fallback_reason else "")

    @classmethod
    def total(cls, reports: Iterable[ContextReport]) -> ContextReport:
        """The sum of several reports (counts and seconds added; usage 'mixed' when they differ; reasons joined).

        >>> ContextReport.total([ContextReport(chunks=2, usage="reported"), ContextReport(chunks=1)]).chunks
        3
        """
        out = cls()
        counts = [f.name for f in fields(cls) if f.name not in ("usage", "fallback_reason")]
        usages: set[str] = set()
        reasons: list[str] = []
        for r in reports:
            for name in counts:
                setattr(out, name, getattr(out, name) + getattr(r, name))
            if r.usage != "none":
                usages.add(r.usage)
            if r.fallback_reason and r.fallback_reason not in reasons:
                reasons.append(r.fallback_reason)
        out.usage = _usage(usages)  # type: ignore[assignment]
        out.seconds = round(out.seconds, 3)
        out.fallback_reason = "; ".join(reasons) or None
        return out


class ContextTally:
    """The running `ContextReport` of one contextualizer, safe to update from its worker threads, and what made it
    fall back for good (`unreachable`: no model, or the LLM refused connections before any answer).

    Example::

        tally = ContextTally()
        tally.begin(chunks=3, cache_hits=1, windowed=0)
        tally.count_call()
        tally.report().llm_calls              # 1
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.stats = ContextReport()
        self.successes = 0
        """LLM answers so far; before the first, "connection refused" means no server (no retries)."""
        self.unreachable: str | None = None
        self._usage_kinds: set[str] = set()

    def begin(self, *, chunks: int, cache_hits: int, windowed: int) -> None:
        """One document: its chunks, those answered from the cache, those whose document is windowed."""
        with self.lock:
            self.stats.documents += 1
            self.stats.chunks += chunks
            self.stats.cache_hits += cache_hits
            self.stats.windowed += windowed

    def count_call(self) -> None:
        with self.lock:
            self.stats.llm_calls += 1

    def add_seconds(self, seconds: float) -> None:
        with self.lock:
            self.stats.seconds += seconds

    def fallback(self, reason: str | None) -> None:
        """One chunk given its header instead of an LLM context (the first reason is kept for the report)."""
        with self.lock:
            self.stats.fallbacks += 1
            self.stats.fallback_reason = self.stats.fallback_reason or self.unreachable or reason

    def answered(self, *, prompt_tokens: int, completion_tokens: int, reported: bool, useless: str) -> None:
        """One LLM answer: its tokens (`reported` by the model, else estimated), and whether it was `useless`
        (the reason; the chunk then gets its header)."""
        with self.lock:
            self.successes += 1
            self._usage_kinds.add("reported" if reported else "estimated")
            self.stats.prompt_tokens += prompt_tokens
            self.stats.completion_tokens += completion_tokens
            if useless:
                self.stats.fallbacks += 1
                self.stats.fallback_reason = self.stats.fallback_reason or useless
            else:
                self.stats.contextualized += 1

    def report(self) -> ContextReport:
        with self.lock:
            usage = _usage(self._usage_kinds)
            return replace(self.stats, usage=usage, seconds=round(self.stats.seconds, 3))  # type: ignore[arg-type]

    def reset(self) -> None:
        with self.lock:
            self.stats = ContextReport()
            self._usage_kinds = set()
