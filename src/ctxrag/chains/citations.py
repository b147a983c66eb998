"""Numbered knowledge blocks and `[n]` citation parsing, shared by the answer chains."""
from __future__ import annotations

import re
from typing import Any

from langchain_core.documents import Document

CITATION_MARK = re.compile(r"\[(\d{1,3}(?:\s*[,，、]\s*\d{1,3})*)\]")
"""A `[n]` or `[n, m]` citation marker; group 1 holds the numbers."""


def format_knowledge(docs: list[Document], max_chars: int | None = None) -> str:
    """Numbered blocks, ``[n] text`` then ``(source: title, path)``, numbered from 1 in retrieval order.

    The text comes first and the source after it: small models given a header first tend to copy it as the answer."""
    blocks = []
    for i, d in enumerate(docs, 1):
        md = d.metadata
        label = md.get("title") or ""
        src = md.get("source") or ""
        head = f"{label}, {src}" if label and src and label not in src else (src or label)
        text = d.page_content if max_chars is None else d.page_content[:max_chars]
        blocks.append(f"[{i}] {text.strip()}\n(source: {head})")
    return "\n\n".join(blocks)


def cited_numbers(answer: str) -> list[int]:
    """Numbers cited as ``[n]`` or ``[n, m]`` in order of first appearance."""
    seen: list[int] = []
    for m in CITATION_MARK.finditer(answer):
        for part in re.split(r"[,，、]", m.group(1)):
            n = int(part.strip())
            if n not in seen:
                seen.append(n)
    return seen


# a source cited by name instead of number: "[Deployment Guide]", "【星河知识库产品概览】" (not a Markdown link "[x](url)")
_NAMED = re.compile(r"[\[【]([^\[\]【】\d][^\[\]【】]{2,150})[\]】](?!\()")


def _name_key(text: str) -> str:
    """A title or file name compared loosely: lower case, ``_``/``-`` as spaces, punctuation and spaces dropped."""
    return re.sub(r"[\W_]+", "", text.lower())


def _names(d: Document) -> set[str]:
    md = d.metadata
    names = {md.get("title") or ""}
    src = str(md.get("source") or "")
    if src:
        base = re.split(r"[\\/]", src)[-1]
        names |= {base, base.rsplit(".", 1)[0]}
    return {k for k in map(_name_key, names) if len(k) >= 4}


def named_citations(answer: str, docs: list[Document]) -> list[int]:
    """Numbers of the sources an answer cites by name in brackets instead of by number, in order of appearance.

    A small model shown ``(source: Deployment Guide, guide.md)`` under a block sometimes cites "[Deployment Guide]".
    A bracketed name matches a source when it equals the source's title, file name or file stem, or (both at least
    six letters) holds it or is held by it; of several matching chunks, the one sharing most words with the answer
    is taken (first on a tie).

    >>> docs = [Document("Port 7420.", metadata={"source": "docs/deployment_guide.md", "title": "Deployment Guide"})]
    >>> named_citations("It listens on 7420, per the [Deployment Guide].", docs)
    [1]
    """
    found: list[int] = []
    ans = _grams(CITATION_MARK.sub("", answer))
    for m in _NAMED.finditer(answer):
        key = _name_key(m.group(1))
        if len(key) < 4:
            continue
        hits = [i for i, d in enumerate(docs, 1)
                if any(key == k or (min(len(k), len(key)) >= 6 and (k in key or key in k)) for k in _names(d))]
        if hits:
            best = max(hits, key=lambda i: (len(ans & _grams(docs[i - 1].page_content)), -i))
            if best not in found:
                found.append(best)
    return found


def source_entry(n: int, d: Document) -> dict[str, Any]:
    md = d.metadata
    return {
        "n": n, "chunk_id": md.get("chunk_id") or d.id, "source": md.get("source"), "title": md.get("title"),
        "kb": md.get("kb"), "heading_path": md.get("heading_path"), "score": md.get("score"), "text": d.page_content,
    }


def _grams(text: str) -> set[str]:
    """Word unigrams for Latin text plus character bigrams for CJK runs: a language-neutral overlap unit."""
    text = text.lower()
    grams = set(re.findall(r"[a-z0-9][a-z0-9_.-]*", text))
    for run in re.findall(r"[\u3400-\u9fff]+", text):
        grams.update(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return grams


def attribute(answer: str, docs: list[Document], min_overlap: float = 0.3) -> list[int]:
    """Numbers of the documents that support an answer which cites nothing: those sharing at least `min_overlap` of
    the answer's words / CJK bigrams, best first (at most 3). Small models often answer right but forget ``[n]``."""
    ans = _grams(answer)
    if not ans:
        return []
    scored = []
    for i, d in enumerate(docs, 1):
        share = len(ans & _grams(d.page_content)) / len(ans)
        if share >= min_overlap:
            scored.append((share, i))
    return [i for _, i in sorted(scored, reverse=True)[:3]]


# a figure: a number not glued to a preceding letter or digit ("P1", "v2" are names), with the word or CJK character
# after it ("30 minutes", "200 GB", "9月"), so a source's "30 元" does not hold an answer's "30 minutes"
_FIGURE = re.compile(r"(?<![A-Za-z0-9_.])(\d+(?:[.,:]\d+)*)\s*([A-Za-z]+|[\u3400-\u9fff%])?")


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def figures(text: str) -> list[str]:
    """The answer's figures, each a number with the unit word after it, spaces removed and lower-cased.

    >>> figures("P1 incidents get an answer within 30 minutes [2]; 2.0 shipped on 2022年9月20日.")
    ['30minutes', '2.0shipped', '2022年', '9月', '20日']
    """
    return [_squash(m.group(1) + (m.group(2) or "")) for m in _FIGURE.finditer(CITATION_MARK.sub("", text))]


def missing_support(answer: str, docs: list[Document], cited: list[int]) -> list[int]:
    """Sources the answer leans on without citing them: for each figure of the answer that no cited source holds
    but some retrieved source does, those sources (a small model often cites a neighbouring number). Figures no
    source holds (the model's own wording) are left alone."""
    texts = [_squash(d.page_content) for d in docs]
    extra: list[int] = []
    for fig in figures(answer):
        holders = [i for i, t in enumerate(texts, 1) if fig in t]
        if holders and not any(i in cited for i in holders):
            extra.extend(i for i in holders if i not in extra)
    return extra


def map_citations(answer: str, docs: list[Document]) -> dict[str, Any]:
    """Citations in `answer` mapped to the numbered `docs`: cited sources, and numbers that match no source.
    A source cited by its name in brackets ("[Deployment Guide]") counts as cited (`named_citations`).

    When the answer cites nothing valid, sources are attributed by overlap (`attribute`) and marked
    ``"inferred": True`` so a reader can tell them from the model's own citations. When it cites some, a figure
    of the answer ("30 minutes") that only an uncited source holds adds that source, also marked ``inferred``
    (`missing_support`)."""
    nums = cited_numbers(answer)
    valid = [n for n in nums if 1 <= n <= len(docs)]
    valid += [n for n in named_citations(answer, docs) if n not in valid]
    sources = [source_entry(n, docs[n - 1]) for n in valid]
    if not sources:
        sources = [dict(source_entry(n, docs[n - 1]), inferred=True) for n in attribute(answer, docs)]
    else:
        sources += [dict(source_entry(n, docs[n - 1]), inferred=True) for n in missing_support(answer, docs, valid)]
    return {"sources": sources, "invalid_citations": [n for n in nums if n not in valid]}
