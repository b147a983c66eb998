"""An answer's `[n]` markers set to the sources the citation check keeps, as the answer streams, so the text cites
exactly the sources listed with it.

The citation check (`ctxrag.chains.citations.check_citations`) may drop a cited chunk that does not hold its
sentence, cite the one that does, or find that no chunk holds a sentence; the sources it lists then differ from the
markers the model wrote. `CheckedMarkers` rewrites each sentence's markers to that sentence's checked sources once
the sentence is complete: a wrong ``[1]`` becomes ``[2]``, a marker no chunk backs is removed, a sentence the check
found a source for gets its marker after it. Where the model writes markers as labels of what follows them (the
answer opens with one), a sentence gets its marker before it (after a list item's bullet), and none where the label
in force in its paragraph already names its sources (``[1] A. B.``, not ``[1] A. [1] B.``). A Markdown link around
a marker (``[here]([3])``) becomes plain text and the marker (``here [3]``). A sentence that only talks about the
sources ("This is stated in source [2].") is left out, and a lead-in naming them ("根据资料[1]，") cut
(`ctxrag.chains.source_talk`); so are a line repeating the user's question ("新增了哪些功能？" as a heading before
its answer) and, after a sentence the check found a source for, a claim that the knowledge base does not cover the
question (`ctxrag.chains.source_talk.no_coverage_claim`: the answer just given contradicts it). Text before a sentence's first ``[`` streams at once; from there to the sentence's
end it is held until the sentence is complete; a sentence that opens as source talk may is held whole. A ``[n]``
inside backticks or a fenced code block is code (``items[1]``), never rewritten.

Example::

    from langchain_core.documents import Document
    from ctxrag.chains.checked_markers import checked_answer
    docs = [Document("The office opens at 9."), Document("The default port is 7420.")]
    checked_answer("The default port is 7420 [1].", docs)       # 'The default port is 7420 [2].'
"""
from __future__ import annotations

import re
from typing import Any

from langchain_core.documents import Document

from ctxrag.chains.citations import CITATION_MARK, check_citations, cited_numbers, sentence_spans, source_entry
from ctxrag.chains.source_talk import may_open_source_talk, no_coverage_claim, source_talk, without_lead_in

LINKED_MARK = re.compile(r"\[([^\[\]\n]{1,80})\]\(\s*\[?(\d{1,3})\]?\s*\)")
"""A Markdown link whose target is a citation number, ``[here]([3])`` or ``[here](3)``: group 1 the text, 2 the
number."""
_PARTIAL_MARK = re.compile(r"\[[\d\s,，、]*")
_CJK_END = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]$")
_BULLET = re.compile(r"(?:[-*+\u2022]|\d{1,3}[.)])[ \t]+")
"""A Markdown list item's bullet (``- ``, ``* ``, ``1. ``): a label goes after it, so the item stays a list item."""


def _code_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"`[^`]*`?", text)]


def markers(text: str) -> list[re.Match[str]]:
    """The citation markers of `text`, leaving out those inside backticks (``items[1]`` as code)."""
    code = _code_spans(text)
    return [m for m in CITATION_MARK.finditer(text) if not any(a <= m.start() < b for a, b in code)]


def marker_numbers(text: str) -> list[int]:
    """The numbers `markers` cite, in order of first appearance."""
    return cited_numbers(" ".join(m.group(0) for m in markers(text)))


def _format(ns: list[int]) -> str:
    return "".join(f"[{n}]" for n in ns)


def rewrite_sentence(sentence: str, sources: list[int], *, labels: bool = False) -> str:
    """`sentence` citing exactly `sources`. Only its text from the first ``[`` on changes; a sentence without a marker
    gets `sources` after it (before trailing white space), or, where markers label what follows them (`labels`: the
    answer opens with one), before it.

    >>> rewrite_sentence("Port 7420 [1].", [2]), rewrite_sentence("端口是 7420。", [2])
    ('Port 7420 [2].', '端口是 7420。[2]')
    >>> rewrite_sentence("See [here]([3]).", [])
    'See here.'
    >>> rewrite_sentence("- 向量检索", [1], labels=True)
    '- [1] 向量检索'
    """
    first = sentence.find("[")
    head_end = len(sentence) if first < 0 else len(sentence[:first].rstrip(" \t"))
    head = sentence[:head_end]
    text = head + LINKED_MARK.sub(r"\1 [\2]", sentence[head_end:])
    found = [m for m in markers(text) if m.start() >= head_end]
    if not found:
        if not sources:
            return text
        if labels:
            lead = len(text) - len(text.lstrip())
            bullet = _BULLET.match(text, lead)
            at = bullet.end() if bullet else lead
            return text[:at] + _format(sources) + " " + text[at:]
        body = text.rstrip()
        return body + ("" if _CJK_END.search(body) else " ") + _format(sources) + text[len(body):]
    if [n for m in found for n in cited_numbers(m.group(0))] == sources:
        return text
    kept: list[str] = []
    pos, insert_at, gap = 0, -1, ""
    for m in found:
        before = text[pos:m.start()]
        stripped = before.rstrip(" \t")
        if insert_at < 0:
            gap = before[len(stripped):]
            insert_at = sum(map(len, kept)) + len(stripped)
        kept.append(stripped)
        pos = m.end()
    kept.append(text[pos:])
    out = "".join(kept)
    mark = gap + _format(sources) if sources else ""
    return out[:insert_at] + mark + out[insert_at:]


class CheckedMarkers:
    """Answer text in (`feed`, then `close`), the same text out with each sentence's markers set to its checked
    sources (see the module docstring). `model_text` is what was fed, `text` what was returned."""

    def __init__(self, docs: list[Document], question: str = "") -> None:
        self.docs = docs
        self._questions = {p for p in (_plain(q) for q in _QUESTION_END.split(question)) if len(p) >= 4}
        self._answered = False  # a sentence was given out with a source the check found
        self.model_text = ""
        self._done = 0  # model_text[:_done] is whole sentences, rewritten into _fixed
        self._fixed = ""
        self._sent = 0  # characters of the output returned so far
        self._label: list[int] | None = None  # where markers are labels: the sources the one in force names

    @property
    def text(self) -> str:
        return (self._fixed + self.model_text[self._done:]).lstrip()

    def feed(self, delta: str) -> str:
        """The output that can be given out now that `delta` was written."""
        self.model_text += delta
        return self._advance(final=False)

    def close(self) -> str:
        """The rest of the output, every sentence complete."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        raw = self.model_text
        if not final and (not raw.strip() or _PARTIAL_MARK.fullmatch(raw.lstrip())):
            return ""  # whether the answer opens with a marker (which then labels what follows) is not known yet
        labels = CITATION_MARK.match(raw.lstrip()) is not None
        spans = sentence_spans(raw, self._done)
        complete = spans if final else [s for s in spans if self._ends(raw, s[1])]
        if complete:
            checked = check_citations(raw[:complete[-1][1]], self.docs) if self.docs else []
            offset = len(checked) - len(complete)
            for i, (a, b) in enumerate(complete):
                sources = checked[offset + i]["sources"] if checked else []
                fenced = raw.count("```", 0, a) % 2 == 1  # a line of a code block: left as written
                self._fixed += raw[self._done:a] + (raw[a:b] if fenced else self._rewrite(raw, a, b, sources, labels))
                self._done = b
        if final:
            self._fixed += raw[self._done:]
            self._done = len(raw)
            out = self._fixed.lstrip()  # an answer opens with its first word (also after source talk left out)
        else:  # the open sentence up to its first "[" (all of it held where markers label what follows, or while
            # it may be source talk; after a lead-in naming the sources, without the lead-in)
            pending = "" if labels else raw[self._done:]
            if self._may_repeat_question(pending):
                pending = ""
            elif pending.strip() and may_open_source_talk(pending):
                cut_lead = without_lead_in(pending)
                pending = cut_lead if cut_lead != pending else ""
            cut = pending.find("[")
            out = (self._fixed + (pending if cut < 0 else pending[:cut]).rstrip()).lstrip()
        piece, self._sent = out[self._sent:], len(out)
        return piece

    def _rewrite(self, raw: str, a: int, b: int, sources: list[int], labels: bool) -> str:
        """The sentence ``raw[a:b]`` citing ``sources``; where markers are labels, unmarked when the label in force in
        its paragraph (a blank line ends one) already names them. Source talk is left out, a lead-in naming the
        sources cut (`ctxrag.chains.source_talk`)."""
        if source_talk(raw[a:b]) or self._repeats_question(raw[a:b]) or (self._answered and
                                                                       no_coverage_claim(raw[a:b])):
            return ""
        self._answered = self._answered or bool(sources)
        if not labels:
            return rewrite_sentence(without_lead_in(raw[a:b]), sources)
        if "\n\n" in raw[self._done:a] or raw[a:b].startswith("\n\n"):
            self._label = None
        sentence = raw[a:b]
        if sources and sources == self._label and not markers(LINKED_MARK.sub(r"\1 [\2]", sentence)):
            return sentence
        self._label = sources
        return rewrite_sentence(sentence, sources, labels=True)

    def _repeats_question(self, sentence: str) -> bool:
        """After the answer's first sentence: a question (it ends with "?" or "？") that is one of the user's."""
        plain = _plain(sentence)
        return (self._done > 0 and plain in self._questions
                and CITATION_MARK.sub("", sentence).rstrip(" \t\n*_").endswith(("?", "？")))

    def _may_repeat_question(self, pending: str) -> bool:
        """Whether `pending`, a sentence still being written after the first, may still turn out to repeat one of
        the user's questions (the answer's first words are never held for this)."""
        plain = _plain(pending)
        return (self._done > 0 and bool(plain) and not markers(pending)
                and any(q.startswith(plain) for q in self._questions))

    @staticmethod
    def _ends(raw: str, end: int) -> bool:
        """Whether the sentence ending at `end` is complete: text follows that no marker of it can start."""
        rest = raw[end:].lstrip(" \t")
        return bool(rest) and not _PARTIAL_MARK.fullmatch(rest)


def _plain(text: str) -> str:
    """`text` without markers, punctuation, Markdown emphasis or white space, lower case: what two wordings share."""
    return _NOT_WORD.sub("", CITATION_MARK.sub("", text)).lower()


_NOT_WORD = re.compile(r"[\W_]+")
_QUESTION_END = re.compile(r"(?<=[?？])")


def checked_answer(answer: str, docs: list[Document], question: str = "") -> str:
    """`answer` with each sentence's markers set to its checked sources (`CheckedMarkers` on the whole text)."""
    cm = CheckedMarkers(docs, question)
    cm.feed(answer)
    cm.close()
    return cm.text


def sources_as_marked(answer: str, docs: list[Document], found: list[dict[str, Any]],
                      model_cited: list[int]) -> list[dict[str, Any]]:
    """The sources `answer`'s markers cite, in order of first use: the check's entry (`found`) for each, or a new
    one, ``inferred`` unless the model cited it (`model_cited`)."""
    by_n = {s["n"]: s for s in found}
    out = []
    for n in marker_numbers(answer):
        if not 1 <= n <= len(docs):
            continue
        entry = by_n.get(n) or source_entry(n, docs[n - 1])
        out.append(entry if n in model_cited or n in by_n else {**entry, "inferred": True})
    return out
