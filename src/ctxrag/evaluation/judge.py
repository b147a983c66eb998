"""LLM-as-judge: answer quality (1-5 with reasons, against the reference answer when there is one) and faithfulness
of an answer to the retrieved context (1-5).

The reply is a `JudgeReply` through structured output (grammar-constrained on the local model). With
``structured=False``, or a model without structured output, it is asked for as JSON in the prompt and a score is also
recovered from prose ("Score: 4", "4/5", "评分：4"); a reply with no score gives ``score=None`` and the raw text as
reason, counted as unparsed by the caller instead of being guessed.

Example::

    from ctxrag.models.chat import make_chat_model
    from ctxrag.evaluation.judge import AnswerJudge
    judge = AnswerJudge(llm=make_chat_model(max_tokens=128))
    judge.correctness("What is 2+2?", "4", reference="Four").score        # 5 if the model agrees
    judge.faithfulness("Paris is in France.", ["Paris is the capital of France."]).score
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from ctxrag.models.parsing import extract_json, parse_number
from ctxrag.models.structured import structured_reply

_SCORE_KEYS = ("score", "rating", "grade", "评分", "分数")
_REASON_KEYS = ("reason", "reasons", "explanation", "rationale", "理由", "原因")
# also matches inside JSON cut off by max_tokens: {"score": 5, "reason": "...
_LABELLED = re.compile(r"(?:score|rating|grade|评分|分数)[\"']?\s*[:：=]?\s*[\"']?\**\s*([1-5](?:\.\d+)?)", re.IGNORECASE)
_REASON = re.compile(r"[\"']?(?:reason|explanation|rationale)[\"']?\s*:\s*[\"']([^\"']+)", re.IGNORECASE)

CORRECTNESS_SYSTEM = (
    "You grade answers to questions. Compare the candidate answer with the reference answer (if given) and the "
    "question. Score 1-5: 5 = fully correct and complete, 4 = correct with minor omissions, 3 = partly correct, "
    "2 = mostly wrong, 1 = wrong or no answer. Reply with JSON only: {\"score\": <1-5>, \"reason\": \"<one sentence>\"}"
)
FAITHFULNESS_SYSTEM = (
    "You check whether an answer is supported by the given context. Score 1-5: 5 = every claim is stated in the "
    "context, 3 = some claims are not in the context, 1 = the answer contradicts or ignores the context. "
    "Reply with JSON only: {\"score\": <1-5>, \"reason\": \"<one sentence>\"}"
)


class JudgeReply(BaseModel):
    """The judge's reply (its structured-output schema): a 1-5 score, then one sentence of reason."""

    score: Literal[1, 2, 3, 4, 5]
    reason: str = Field(default="", max_length=300)


@dataclass
class Judgement:
    """A judge's verdict: ``score`` 1-5 (None when the reply had none), ``reason`` and the ``raw`` reply."""

    score: int | None
    reason: str
    raw: str

    @property
    def normalized(self) -> float | None:
        """The score mapped to [0, 1] ((score - 1) / 4)."""
        return None if self.score is None else (self.score - 1) / 4


def parse_judgement(text: str) -> Judgement:
    """Score and reason from a judge reply: JSON first, then a labelled score, then a lone 1-5 number."""
    raw = text or ""
    score: float | None = None
    reason = ""
    try:
        data: Any = extract_json(raw)
    except ValueError:
        data = None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    if isinstance(data, dict):
        for key in _SCORE_KEYS:
            value = data.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 1 <= value <= 5:
                score = float(value)
            elif isinstance(value, str):
                score = parse_number(value, 1, 5)
            if score is not None:
                break
        for key in _REASON_KEYS:
            value = data.get(key)
            if value:
                reason = value if isinstance(value, str) else "; ".join(map(str, value)) if isinstance(value, list) else str(value)
                break
    if score is None:
        m = _LABELLED.search(raw)
        if m:
            score = float(m.group(1))
    if score is None:
        stripped = raw.strip()
        # a reply that is just a number ("4", "4/5", "4.")
        if re.fullmatch(r"\**\s*[1-5](?:\.\d+)?\s*(?:/\s*5)?\s*\.?\**", stripped):
            score = parse_number(stripped, 1, 5)
    if not reason:
        m = _REASON.search(raw)
        reason = m.group(1).strip() if m else raw.strip()[:500]
    return Judgement(score=None if score is None else int(round(score)), reason=reason, raw=raw)


class AnswerJudge:
    """Scores answers with a chat model (any LangChain `BaseChatModel`; the local GGUF works).

    Example::

        AnswerJudge(llm).correctness("Who wrote Hamlet?", "Shakespeare", reference="William Shakespeare")
    """

    def __init__(self, llm: BaseChatModel, max_context_chars: int = 6000, *, structured: bool = True) -> None:
        self.llm = llm
        self.max_context_chars = max_context_chars
        self.structured = structured
        """Ask for a `JudgeReply` through structured output (else parse the reply's text)."""

    def _ask(self, system: str, user: str) -> Judgement:
        reply = structured_reply(self.llm, JudgeReply, [SystemMessage(system), HumanMessage(user)],
                                 structured=self.structured)
        if isinstance(reply.parsed, JudgeReply):
            return Judgement(score=reply.parsed.score, reason=reply.parsed.reason, raw=reply.text)
        return parse_judgement(reply.text)

    def correctness(self, question: str, answer: str, reference: str | None = None) -> Judgement:
        """1-5 quality of ``answer`` to ``question``, against ``reference`` when given."""
        if not answer or not answer.strip():
            return Judgement(1, "empty answer", "")
        ref = f"Reference answer:\n{reference}\n\n" if reference else "No reference answer; judge by the question.\n\n"
        return self._ask(CORRECTNESS_SYSTEM, f"Question:\n{question}\n\n{ref}Candidate answer:\n{answer}\n\nJSON:")

    def faithfulness(self, answer: str, contexts: Sequence[str]) -> Judgement:
        """1-5 support of ``answer`` by the retrieved ``contexts``."""
        if not answer or not answer.strip():
            return Judgement(None, "empty answer: nothing to check", "")
        context = "\n\n".join(f"[{i}] {c}" for i, c in enumerate(contexts, 1))[: self.max_context_chars]
        return self._ask(FAITHFULNESS_SYSTEM, f"Context:\n{context}\n\nAnswer:\n{answer}\n\nJSON:")
