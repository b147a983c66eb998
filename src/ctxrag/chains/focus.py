"""Fewer prompt tokens: each long retrieved chunk given to the model as its sentences that matter to the question.

On a CPU the local model reads the prompt at a fixed rate, so four whole chunks cost seconds before the first token
(the evidence check's quote call reads them first; the answer then reuses them from llama.cpp's context).
`SentenceFocus` keeps, of a chunk longer than ``max_chars``, the sentences holding the question's terms (each term
weighted by its rarity, `ctxrag.chains.key_terms.KeyTerms`: the knowledge base's BM25 frequencies when given, else
the retrieved chunks' own), each with the ``neighbours`` sentences after it (a FAQ's answer follows its question, a
section's text its heading), best first until ``max_chars``, in the chunk's order; what it leaves out is marked
``…``. A chunk with no sentence holding a term stays whole (a Chinese question over an English chunk, code: the
terms cannot show what matters there). Only the prompt changes: the chain's ``documents``,
the evidence check's quote matching and the citation check still read the whole chunks (a quote from the kept
sentences is in them).

On by default at 300 characters (``answer_focus_chars``; 0 gives whole chunks): the answers and citations pages
measured it beside whole chunks in one run without a loss (docs/answers.md). It can drop the sentence holding the
answer (a fact stated in the sentence before the one naming the question's terms); how often is on the
``answer_focus`` benchmark page.

Example::

    from langchain_core.documents import Document
    from ctxrag.chains.focus import SentenceFocus
    doc = Document("星河知识库支持六种格式。部署要求 8 GB 内存。服务默认监听 7420 端口。价格见官网。")
    SentenceFocus(max_chars=20, neighbours=0).focus("默认端口是多少？", [doc])[0].page_content
    # '… 服务默认监听 7420 端口。 …'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from langchain_core.documents import Document

from ctxrag.chains.key_terms import KeyTerms, Tokenizer, sentences_of

GAP = "…"
"""What stands for the sentences left out of a chunk."""
FOCUSED_FROM = "focused_from"
"""Metadata key of a focused chunk: the length of its whole text."""


@dataclass(frozen=True)
class SentenceFocus:
    """Chunks longer than ``max_chars`` cut to their sentences that hold the question's terms (see the module).

    ``terms``: rarity weights (`KeyTerms.from_knowledge_base`); None: counted over the chunks being focused.
    """

    max_chars: int
    neighbours: int = 1
    terms: KeyTerms | None = None

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {self.max_chars!r}")
        if self.neighbours < 0:
            raise ValueError(f"neighbours must be >= 0, got {self.neighbours!r}")

    def focus(self, question: str, docs: Sequence[Document]) -> list[Document]:
        """``docs`` with each chunk over ``max_chars`` cut to its best sentences (copies; the others as they are)."""
        long = [d for d in docs if len(d.page_content.strip()) > self.max_chars]
        if not long:
            return list(docs)
        terms = self.terms or KeyTerms.from_texts([s for d in docs for s in sentences_of(d.page_content)])
        weights = terms.weights(question)
        return [self._cut(d, weights, terms.tokenizer) if any(d is x for x in long) else d for d in docs]

    def _cut(self, doc: Document, weights: dict[str, float], tokenize: Tokenizer) -> Document:
        sentences = sentences_of(doc.page_content)
        scores = []
        for s in sentences:
            held = set(tokenize(s))
            scores.append(sum(w for t, w in weights.items() if t in held))
        order = sorted((i for i, sc in enumerate(scores) if sc > 0), key=lambda i: (-scores[i], i))
        kept: set[int] = set()
        used = 0
        for i in order:
            group = [j for j in range(i, min(i + self.neighbours + 1, len(sentences))) if j not in kept]
            size = sum(len(sentences[j].strip()) + 1 for j in group)
            if kept and used + size > self.max_chars:
                continue
            kept.update(group)
            used += size
            if used >= self.max_chars:
                break
        if not kept:  # nothing names the question's terms: they cannot tell what matters here
            return doc
        parts: list[str] = []
        for j in range(len(sentences)):
            if j in kept:
                parts.append(sentences[j].strip())
            elif not parts or parts[-1] != GAP:
                parts.append(GAP)
        text = " ".join(parts)
        return Document(page_content=text, metadata={**doc.metadata, FOCUSED_FROM: len(doc.page_content)},
                        id=doc.id)
