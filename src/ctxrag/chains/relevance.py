"""The relevance gate: do the retrieved chunks support answering the question, or does the knowledge base have
nothing on it?

A small model given chunks that do not hold the answer answers anyway, from memory, and cites whatever it was
given. The gate looks at the question and the retrieved chunks before the model is asked, from two signals:

- ``margin``: the best cosine between the question and a retrieved chunk (the dense retriever's, from the stored
  vectors), minus the best cosine between the question
  and a fixed set of generic background passages (`ctxrag.chains.router.BACKGROUND_PASSAGES`). e5 cosines are high
  for any pair of texts, so a margin over this null model separates "about this" from "about anything" better than
  a raw cosine; it also works across languages.
- ``overlap``: the share of the question's content words (jieba for Chinese, Traditional folded to Simplified,
  stopwords and question words dropped) that the best chunk contains.

A question is supported when ``margin >= min_margin`` or ``overlap >= min_overlap`` (the defaults were chosen on a
calibration set by ``bench/bench_answer_gate.py``; the measured abstention rates are on its benchmark page). A
question asked in another language than every retrieved chunk shares no words with them and gets lower cosines, so it
is only held to ``margin >= min_margin_cross``, a low bar: the gate is the first stage, and whether a chunk states the
answer is the evidence check's to decide (`ctxrag.chains.evidence`; ``bench/bench_abstention.py``). The
same gate turns the assistant's ``rag`` route into ``no_knowledge``; an optional LLM yes/no check (``llm=``) can
follow a passed score check.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.chains.relevance import RelevanceGate
    kb = KnowledgeBase.open("demo")
    gate = RelevanceGate(kb.embeddings)
    docs = kb.as_retriever(k=4).invoke("珠穆朗玛峰有多高？")
    verdict = gate.check("珠穆朗玛峰有多高？", docs)
    verdict.supported, verdict.reason   # False, 'retrieved chunks do not match the question (margin ..., overlap ...)'
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig

from ctxrag.chains.router import BACKGROUND_PASSAGES, INTENT_EXAMPLES, load_shipped_vectors
from ctxrag.models.embeddings import embed_array
from ctxrag.models.parsing import parse_yes_no
from ctxrag.prompts.router import NO_KNOWLEDGE_NOTICE, relevance_messages
from ctxrag.stores.bm25.tokenize import make_tokenizer
from ctxrag.text import detect_language, is_traditional_chinese, to_simplified

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from langchain_core.language_models import BaseChatModel

log = logging.getLogger(__name__)

DEFAULT_MIN_MARGIN = 0.04
"""Default ``min_margin`` (see the module docstring and the ``answer_gate`` benchmark page)."""
DEFAULT_MIN_OVERLAP = 0.35
"""Default ``min_overlap``."""
DEFAULT_MIN_MARGIN_CROSS = 0.0
"""Default ``min_margin_cross``: the margin a question in another language than all its chunks needs."""

# question words and fillers that say nothing about the topic (the evidence check drops a few more); the shipped stopword lists keep some of them
QUESTION_WORDS = frozenset(
    "什么 什麼 哪些 哪个 哪個 哪一 哪 多少 几 幾 如何 怎么 怎麼 怎样 怎樣 为什么 為什麼 是否 吗 嗎 呢 请问 請問 "
    "which what who whom whose when where why how does do did is are was were can could the a an of".split())


@dataclass(frozen=True)
class Relevance:
    """The gate's verdict on one question and its retrieved chunks."""

    supported: bool
    """Whether the chunks support an answer; False: the knowledge base has nothing on the question."""
    margin: float
    """Best question-chunk cosine minus best question-background cosine (minus one when nothing was retrieved)."""
    overlap: float
    """Share of the question's content words found in the best chunk (0.0 when nothing was retrieved)."""
    reason: str
    cross_language: bool = False
    """Whether the question is in another language than every retrieved chunk."""

    def to_dict(self) -> dict[str, Any]:
        return {"supported": self.supported, "margin": round(self.margin, 4), "overlap": round(self.overlap, 4),
                "cross_language": self.cross_language, "reason": self.reason}


def no_knowledge_notice(question: str) -> str:
    """The fixed "the knowledge base has nothing on this" answer, in the question's language and script.

    >>> no_knowledge_notice("黃鐵礦由鐵和哪一元素所構成？")
    '知識庫中沒有關於「黃鐵礦由鐵和哪一元素所構成？」的資料。'
    """
    lang = detect_language(question)
    key = "zh-hant" if lang == "zh" and is_traditional_chinese(question) else lang
    return NO_KNOWLEDGE_NOTICE[key].format(question=question)


def is_cross_language(question: str, docs: Sequence[Document]) -> bool:
    """Whether ``question`` is in another language (`detect_language`) than every one of ``docs``.

    >>> is_cross_language("How fast is a P1 answered?", [Document("P1 故障在 30 分钟内响应。")])
    True
    """
    lang = detect_language(question)
    return bool(docs) and all(detect_language(d.page_content[:2000]) != lang for d in docs)


class RelevanceGate:
    """Decides whether retrieved chunks support answering a question (see the module docstring).

    ``embeddings`` should be the knowledge base's embedding model (its cache then holds the chunk vectors);
    None takes the default one from the settings on first use.
    """

    def __init__(self, embeddings: Embeddings | None = None, *, min_margin: float = DEFAULT_MIN_MARGIN,
                 min_overlap: float = DEFAULT_MIN_OVERLAP, min_margin_cross: float = DEFAULT_MIN_MARGIN_CROSS,
                 llm: BaseChatModel | None = None, background: Sequence[str] | None = None) -> None:
        if not -1.0 <= min_margin <= 1.0:
            raise ValueError(f"min_margin must be in [-1, 1], got {min_margin!r}")
        if not 0.0 <= min_overlap <= 1.0 + 1e-9:
            raise ValueError(f"min_overlap must be in [0, 1] (1 turns the lexical signal off), got {min_overlap!r}")
        self._embeddings = embeddings
        self.min_margin = min_margin
        if not -1.0 <= min_margin_cross <= 1.0:
            raise ValueError(f"min_margin_cross must be in [-1, 1], got {min_margin_cross!r}")
        self.min_overlap = min_overlap
        self.min_margin_cross = min_margin_cross
        self.llm = llm
        self.background = list(background) if background is not None else BACKGROUND_PASSAGES
        self._lock = threading.Lock()
        self._background_vecs: np.ndarray | None = None
        self._tokenize = make_tokenizer("mixed", stopwords=True)

    @property
    def embeddings(self) -> Embeddings:
        if self._embeddings is None:
            from ctxrag.models.embeddings import make_embeddings

            self._embeddings = make_embeddings()
        return self._embeddings

    def _background_vectors(self) -> np.ndarray:
        with self._lock:
            if self._background_vecs is None:
                shipped = None
                if self.background is BACKGROUND_PASSAGES:
                    shipped = load_shipped_vectors(self.embeddings, INTENT_EXAMPLES, BACKGROUND_PASSAGES)
                self._background_vecs = shipped[1] if shipped else embed_array(self.embeddings, list(self.background))
            return self._background_vecs

    def margin(self, question: str, docs: Sequence[Document]) -> float:
        """Best question-chunk cosine minus best question-background cosine; minus one without chunks.

        The chunk cosines are the dense retriever's (``metadata["cosine"]``, kept through fusion), so the stored
        chunk vectors are used and nothing is embedded again; only when no chunk carries one (a keyword-only
        retriever) are the chunk texts embedded."""
        texts = [d.page_content for d in docs if d.page_content.strip()]
        if not texts:
            return -1.0
        qvec = embed_array(self.embeddings, [question], is_query=True)[0]
        cosines = [float(c) for d in docs if isinstance(c := d.metadata.get("cosine"), (int, float))]
        best = max(cosines) if cosines else float((embed_array(self.embeddings, texts) @ qvec).max())
        return best - float((self._background_vectors() @ qvec).max())

    def _content_words(self, text: str) -> set[str]:
        return {w for w in self._tokenize(to_simplified(text).lower()) if w not in QUESTION_WORDS and w.strip()}

    def overlap(self, question: str, docs: Sequence[Document]) -> float:
        """Share of the question's content words found in the best chunk; 0.0 without chunks or content words."""
        asked = self._content_words(question)
        if not asked or not docs:
            return 0.0
        return max(len(asked & self._content_words(d.page_content)) / len(asked) for d in docs)

    def check(self, question: str, docs: Sequence[Document], config: RunnableConfig | None = None) -> Relevance:
        """The verdict for `question` given its retrieved `docs`."""
        if not docs:
            return Relevance(False, -1.0, 0.0, "retrieval found nothing")
        margin, overlap = self.margin(question, docs), self.overlap(question, docs)
        cross = is_cross_language(question, docs)
        if cross:
            signals = f"margin {margin:.3f} (min {self.min_margin_cross:.3f} across languages)"
            passed = margin >= self.min_margin_cross
        else:
            signals = (f"margin {margin:.3f} (min {self.min_margin:.3f}), overlap {overlap:.2f} "
                       f"(min {self.min_overlap:.2f})")
            passed = margin >= self.min_margin or overlap >= self.min_overlap
        if not passed:
            return Relevance(False, margin, overlap, f"retrieved chunks do not match the question ({signals})", cross)
        if self.llm is not None and self._llm_says_irrelevant(question, docs[0], config):
            return Relevance(False, margin, overlap, f"the model judged the best chunk irrelevant ({signals})", cross)
        return Relevance(True, margin, overlap, f"relevant ({signals})", cross)

    def _llm_says_irrelevant(self, question: str, doc: Document, config: RunnableConfig | None) -> bool:
        if self.llm is None:
            return False
        try:
            reply = self.llm.bind(max_tokens=4).invoke(
                relevance_messages(question, doc.page_content[:1200], detect_language(question)), config)
        except Exception as e:  # noqa: BLE001 - the score check already passed
            log.warning("LLM relevance check failed (%s); keeping the retrieved chunks", e)
            return False
        return parse_yes_no(str(getattr(reply, "content", reply))) is False
