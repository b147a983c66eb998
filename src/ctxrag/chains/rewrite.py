"""Rewrite a follow-up question into a standalone one before routing and retrieval.

"那企业版呢？" after a question about the Team plan's price becomes "星河知识库企业版每月多少钱？". Without a chat model (or
without history) the question is returned unchanged; a reply that looks broken (empty, far too long, another language)
is ignored, so a weak model can never make the question worse than it was.

Example::

    from ctxrag.chains.rewrite import QuestionRewriter
    rw = QuestionRewriter(llm)                 # llm=None: identity
    rw.rewrite("那企业版呢？", [("human", "团队版多少钱？"), ("ai", "每月 699 元。")])
"""
from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Sequence

from langchain_core.runnables import RunnableConfig

from ctxrag.history import format_history
from ctxrag.prompts.router import rewrite_messages
from ctxrag.text import detect_language

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from langchain_core.language_models import BaseChatModel

log = logging.getLogger(__name__)

_PREFIX = re.compile(r"^\s*(rewritten question|standalone question|question|改写后的问题|问题)\s*[:：]\s*", re.IGNORECASE)


class QuestionRewriter:
    """Follow-up -> standalone question with a chat model; identity without one."""

    def __init__(self, llm: BaseChatModel | None = None, *, max_tokens: int = 60) -> None:
        self.llm = llm
        self.max_tokens = max_tokens

    def rewrite(
        self, question: str, history: Sequence[Any] | None = None, *, config: RunnableConfig | None = None
    ) -> str:
        """The standalone question; `config` (callbacks, tags) is passed to the LLM call."""
        if self.llm is None or not history:
            return question
        lang = detect_language(question)
        try:
            reply = self.llm.bind(max_tokens=self.max_tokens).invoke(
                rewrite_messages(question, format_history(history), lang), config)
        except Exception as e:  # noqa: BLE001 - rewriting is an optimisation; keep the question on failure
            log.warning("question rewrite failed (%s); keeping the question as asked", e)
            return question
        text = str(getattr(reply, "content", reply)).strip().splitlines()[0:1]
        cand = _PREFIX.sub("", text[0]).strip().strip('"“”') if text else ""
        if not cand or len(cand) > max(200, 4 * len(question)) or detect_language(cand) != lang:
            return question
        return cand
