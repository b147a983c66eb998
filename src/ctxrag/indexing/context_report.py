"""What contextualizing a batch of documents cost: chunks, cache hits, LLM calls, tokens, fallbacks, time.

Example::

    from ctxrag.indexing.context_report import ContextReport
    print(ContextReport(documents=1, chunks=3, contextualized=3, llm_calls=3))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
