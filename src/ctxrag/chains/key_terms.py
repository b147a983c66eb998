"""Key-term coverage: how much of what a question specifically names one retrieved sentence holds, each of the
question's terms weighted by its rarity in the knowledge base (its BM25 document frequencies).

A question of the knowledge base's own kind whose answer is absent usually names something the knowledge base never
mentions, or mentions elsewhere ("蒙古帝國的首都" over paragraphs on other empires): its generic words ("首都",
"function", "return") are in many chunks, its specific ones are not. Weighting each term by its inverse document
frequency makes the rare, specific terms count and the generic ones hardly at all; the share is taken over the best
single sentence (with its chunk's title and heading, which name what the sentence is about), since chunks of the same
kind share words everywhere but a sentence that states the answer holds the question's subject. No model call.

Measured only where the question and a chunk are in the same language: a Chinese question about an English chunk
shares no terms with it (`coverage` returns None and the decision is left to the other stages).

Example::

    from langchain_core.documents import Document
    from ctxrag.chains.key_terms import KeyTerms
    terms = KeyTerms.from_texts(["黃鐵礦由鐵和硫所構成。", "黃金是一種金屬。", "鐵是一種金屬。"])
    terms.coverage("黃鐵礦由鐵和哪一元素所構成？", [Document("黃鐵礦由鐵和硫兩種元素所構成。")])   # 1.0
    terms.coverage("蒙古帝國的首都在哪裡？", [Document("黃金是一種金屬。")])                     # 0.0
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from langchain_core.documents import Document

from ctxrag.chains.relevance import QUESTION_WORDS
from ctxrag.stores.bm25.tokenize import make_tokenizer
from ctxrag.text import detect_language, to_simplified

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from ctxrag.stores.protocols import KnowledgeSource

Tokenizer = Callable[[str], list[str]]

_QUESTION_TERMS = QUESTION_WORDS | frozenset("何 为何 何时 哪里 谁 时候 什么 多少 几 哪 吗 呢".split())


_ASKING = ("哪", "什么", "多少", "几", "谁", "为什么", "怎么", "怎样", "如何", "为何")


def _asks(term: str) -> bool:
    """Whether a (folded) term is a question word jieba kept whole ("哪一年", "哪种", "何处", "什么样"): it names
    what is asked, never something a sentence holds."""
    return term.startswith(_ASKING) or (term.startswith("何") and len(term) <= 2)


SENTENCE_END = re.compile(r"[。！？!?；;\n]|\.(?=\s)")


def sentences_of(text: str) -> list[str]:
    """``text`` cut after each sentence end (`SENTENCE_END`), blank pieces dropped.

    >>> sentences_of("雪山在臺中。玉山最高。 Tea. Coffee")
    ['雪山在臺中。', '玉山最高。', ' Tea.', ' Coffee']
    """
    out, start = [], 0
    for m in SENTENCE_END.finditer(text):
        out.append(text[start:m.end()])
        start = m.end()
    out.append(text[start:])
    return [p for p in out if p.strip()]


def sentences_with_heading(doc: Document) -> Iterable[str]:
    """Each sentence of ``doc`` followed by the chunk's title and heading path (what the sentence is about)."""
    heading = " ".join(str(doc.metadata.get(k) or "") for k in ("title", "heading_path"))
    for sentence in sentences_of(doc.page_content) or [doc.page_content]:
        yield f"{sentence} {heading}"


class KeyTerms:
    """Rarity-weighted question-term coverage over a knowledge base's document frequencies.

    ``tokenize``: the knowledge base's BM25 tokenizer; ``document_frequency``: term -> number of chunks holding it;
    ``n_docs``: number of chunks. A term the knowledge base never holds gets the highest weight.
    """

    def __init__(self, tokenize: Tokenizer, document_frequency: Mapping[str, int], n_docs: int) -> None:
        if n_docs < 0:
            raise ValueError(f"n_docs must be >= 0, got {n_docs!r}")
        self._tokenize = tokenize
        self._df = document_frequency
        self._n = n_docs

    @classmethod
    def from_texts(cls, texts: Sequence[str], tokenizer: str = "mixed") -> "KeyTerms":
        """Frequencies counted over ``texts`` (one chunk each), with the named BM25 tokenizer."""
        tokenize = make_tokenizer(tokenizer, stopwords=True)
        df: Counter[str] = Counter()
        for t in texts:
            df.update(set(tokenize(to_simplified(t).lower())))
        return cls(lambda s: tokenize(to_simplified(s).lower()), df, len(texts))

    @classmethod
    def from_knowledge_base(cls, kb: KnowledgeSource) -> "KeyTerms | None":
        """Frequencies read from ``kb``'s BM25 index (every segment added up) with its tokenizer, read again after
        the index changes; None when it has no BM25 index that can be read this way."""
        if _bm25_statistics(kb) is None:
            return None
        return _KnowledgeBaseKeyTerms(kb)

    def _statistics(self) -> tuple[Tokenizer, Mapping[str, int], int]:
        return self._tokenize, self._df, self._n

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer the frequencies were counted with (text -> terms, folded as the weights' terms are)."""
        return self._statistics()[0]

    def weights(self, question: str) -> dict[str, float]:
        """The question's terms (question words left out) and their weights, ``log((N + 1) / (df + 0.5))``."""
        tokenize, df, n = self._statistics()
        terms = {t for t in tokenize(question) if t.strip() and t not in _QUESTION_TERMS}
        return {t: math.log((n + 1) / (df.get(t, 0) + 0.5)) for t in terms}

    def coverage(self, question: str, docs: Sequence[Document]) -> float | None:
        """The best weighted share of the question's terms one sentence of ``docs`` holds (with its chunk's title),
        over the chunks in the question's language; None when there is none or the question has no terms."""
        weights = self.weights(question)
        total = sum(weights.values())
        lang = detect_language(question)
        same = [d for d in docs if detect_language(d.page_content[:2000]) == lang]
        if not same or total <= 0:
            return None
        tokenize = self._statistics()[0]
        best = 0.0
        for d in same:
            for sentence in sentences_with_heading(d):
                held = set(tokenize(sentence))
                best = max(best, sum(w for t, w in weights.items() if t in held) / total)
        return best

    def predicate_coverage(self, question: str, docs: Sequence[Document]) -> float | None:
        """The best weighted share of the question's *predicate* terms one sentence of ``docs`` holds: its terms
        less the topic's (those in the best same-language chunk's title and heading, and those every same-language
        chunk holds). None when there is no chunk in the question's language or the question names only the topic.

        Chunks retrieved for a question whose answer was left out of an article are the article's other paragraphs:
        they all name the topic, so `coverage` is high, but no sentence holds what the question asks of it
        ("首都", "成立於").
        """
        weights = self.weights(question)
        lang = detect_language(question)
        same = [d for d in docs if detect_language(d.page_content[:2000]) == lang]
        if not same:
            return None
        tokenize = self._statistics()[0]
        heading = " ".join(str(same[0].metadata.get(k) or "") for k in ("title", "heading_path"))
        topic = set(tokenize(heading))
        if len(same) > 1:
            topic |= set.intersection(*(set(tokenize(d.page_content)) for d in same))
        asked = {t: w for t, w in weights.items() if t not in topic and not _asks(t)}
        total = sum(asked.values())
        if total <= 0:
            return None
        best = 0.0
        for d in same:
            for sentence in sentences_of(d.page_content) or [d.page_content]:
                held = set(tokenize(sentence))
                best = max(best, sum(w for t, w in asked.items() if t in held) / total)
        return best


def _bm25_statistics(kb: KnowledgeSource) -> tuple[Any, Tokenizer, Counter[str], int] | None:
    """``(the index read, its tokenizer, term -> chunks holding it, chunks)`` of ``kb``'s BM25 index; None without
    one."""
    try:
        index = kb.keyword_index()
        current = index.current() if hasattr(index, "current") else index
    except Exception:  # noqa: BLE001 - a knowledge base without BM25: no key-term stage
        return None
    parts = [p for p, _ in current.parts()] if hasattr(current, "parts") else [current]
    found = [getattr(p, "index", None) for p in parts]
    bm25 = [b for b in found if b is not None and hasattr(b, "document_frequencies")]
    if not bm25 or len(bm25) != len(found):
        return None
    df: Counter[str] = Counter()
    for b in bm25:
        counts = b.document_frequencies
        for term, i in b.vocabulary.items():
            if counts[i]:
                df[term] += int(counts[i])
    return current, bm25[0].tokenize_query, df, sum(len(b) for b in bm25)


class _KnowledgeBaseKeyTerms(KeyTerms):
    """`KeyTerms` over a knowledge base's BM25 index, read again when a new generation is committed."""

    def __init__(self, kb: KnowledgeSource) -> None:
        self._kb = kb
        self._read: Any = None
        self._version: Any = None
        super().__init__(str.split, {}, 0)

    def _statistics(self) -> tuple[Tokenizer, Mapping[str, int], int]:
        try:
            index = self._kb.keyword_index()
            current = index.current() if hasattr(index, "current") else index
        except Exception:  # noqa: BLE001 - the index went away: keep the last frequencies read
            current = self._read
        if current is not self._read or getattr(current, "version", None) != self._version:
            stats = _bm25_statistics(self._kb)
            if stats is not None:
                self._read, self._tokenize, self._df, self._n = stats
                self._version = getattr(self._read, "version", None)
        return self._tokenize, self._df, self._n
