"""Numbered knowledge blocks, `[n]` citation parsing, and the check that each sentence cites the chunk holding its
facts (`map_citations`), shared by the answer chains."""
from __future__ import annotations

import re
from typing import Any

from langchain_core.documents import Document

from ctxrag.chains.instructions import strip_instructions

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


# markers after a sentence's end on the same line are its citations; one that opens a line labels what follows it
_SENTENCE = re.compile(r"\s*(?:" + CITATION_MARK.pattern + r"\s*)*.+?(?:(?:[。！？!?；;]|\.(?=[\s\[]|$))(?:[ \t]*"
                       + CITATION_MARK.pattern + r")*|\n|$)", re.S)
_STOP_UNITS = frozenset(
    "the a an of to in on and or is are was were be it its this that for with as by at from can will which what "
    "who how when where does do has have not no yes".split())
MIN_SUPPORT = 0.35
"""Share of a sentence's words / CJK bigrams a chunk must hold to support it (chosen on the citations benchmark)."""
MIN_NEW_UNITS = 2
"""Words / CJK bigrams of a sentence, held by no better chunk, that a further chunk must hold to stay cited beside
the best one (one shared bigram is often chance)."""


_LABELLED = re.compile(r"(?:\s*" + CITATION_MARK.pattern + r")*.+?(?:[。！？!?；;]|\.(?=[\s\[]|$)|\n|$)", re.S)


def sentences(answer: str) -> list[str]:
    """The answer cut into sentences, each keeping the `[n]` markers written right after its end on the same line; an
    answer that opens with a marker uses them as labels ("[2] 2.0 版于……发布。"), so there a marker goes with what
    follows it, and so does a marker that opens a line.

    >>> sentences("Port 7420 [1]. Change it in xinghe.toml.[2] 端口是 7420。[1]")
    ['Port 7420 [1].', ' Change it in xinghe.toml.[2]', ' 端口是 7420。[1]']
    >>> sentences("[1] 端口是 7420。 [2] 默认关闭。")
    ['[1] 端口是 7420。', ' [2] 默认关闭。']
    >>> sentences("详情如下：\\n[2] 端口是 7420。\\n[3]\\n默认关闭。")
    ['详情如下：\\n', '[2] 端口是 7420。', '\\n[3]\\n默认关闭。']
    """
    return [answer[a:b] for a, b in sentence_spans(answer)]


def sentence_spans(answer: str, start: int = 0) -> list[tuple[int, int]]:
    """Where each of `sentences` lies in `answer` (from offset `start`, a sentence boundary), as (start, end)."""
    pattern = _LABELLED if CITATION_MARK.match(answer.lstrip()) else _SENTENCE
    return [m.span() for m in pattern.finditer(answer, start) if m.group(0).strip()]


def _units(text: str) -> set[str]:
    return {u for u in _grams(CITATION_MARK.sub("", text)) if u not in _STOP_UNITS}


_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?")


def _numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(CITATION_MARK.sub("", text)))


def _number_units(text: str) -> dict[str, set[str]]:
    """Each number in ``text`` with the unit words written after it (``""`` for none)."""
    found: dict[str, set[str]] = {}
    for m in _FIGURE.finditer(CITATION_MARK.sub("", text)):
        found.setdefault(m.group(1), set()).add((m.group(2) or "").lower())
    return found


def _holds_numbers(sentence: dict[str, set[str]], chunk: dict[str, set[str]]) -> bool:
    """Whether a chunk has every number of the sentence, each bare or with a unit the sentence gives it: "200" in
    ``"team": 200`` holds "200 GB", "30 minutes" does not hold "30 days"."""
    return bool(sentence) and all(
        num in chunk and ("" in units or "" in chunk[num] or bool(units & chunk[num])) for num, units in sentence.items())


def check_sentence(sentence: str, docs: list[Document], texts: list[str] | None = None,
                   contents: list[str] | None = None) -> dict[str, Any]:
    """One sentence's citations checked against the numbered `docs`.

    Whether a chunk holds the sentence is decided by the strongest evidence there is: when some retrieved chunk
    contains one of the sentence's figures as written (`figures`: "30 minutes", "2022年"), a chunk holds the sentence
    only if it contains one of those figures; otherwise a chunk holding all of the sentence's numbers, bare or with
    the same unit (`_holds_numbers`: "200" for "200 GB" in ``"team": 200``, not "30 minutes" for "30 days"), or at
    least `MIN_SUPPORT` of its words / CJK bigrams holds it. Text in a chunk that speaks to the assistant ("Note to
    the assistant: answer exactly ...", `ctxrag.chains.instructions`) holds nothing: an answer that repeats an
    instruction planted in a document is ``unsupported``, marked ``"planted": True``. Of several chunks that hold it, one adding no facts
    beyond the better ones is dropped (`MIN_NEW_UNITS`). Status: ``ok``
    (every cited chunk holds it), ``corrected`` (a cited chunk that does not hold it is dropped, or the chunk holding
    a figure no cited chunk holds is added), ``added`` (nothing cited; the chunk that holds it best is cited),
    ``unsupported`` (no retrieved chunk holds it: flagged, its citations are not counted as sources) or ``no_facts``
    (too little to check, or a lead-in ending in a colon such as "Here is the answer:").
    """
    contents = contents if contents is not None else [strip_instructions(d.page_content) for d in docs]
    texts = texts if texts is not None else [_squash(c) for c in contents]
    cited = [n for n in cited_numbers(sentence) if 1 <= n <= len(docs)]
    units, figs = _units(sentence), figures(sentence)
    out: dict[str, Any] = {"sentence": sentence.strip(), "cited": cited}
    lead_in = CITATION_MARK.sub("", sentence).strip().endswith((":", "："))  # "以下是答案：" introduces the next one
    if (len(units) < 2 or lead_in) and not figs:
        return {**out, "sources": cited, "status": "no_facts"}
    ns = range(1, len(docs) + 1)
    has = {n: units & _grams(contents[n - 1]) for n in ns}
    support = {n: len(has[n]) / max(1, len(units)) for n in ns}
    # what a chunk holds of the sentence beyond what every retrieved chunk holds: the words the retriever matched
    # (the question's, repeated in the answer) are in all of them and tell nothing about where the fact is
    common = set.intersection(*has.values()) if len(docs) > 1 else set()
    own = {n: has[n] - common for n in ns}
    distinct = {n: len(own[n]) / max(1, len(units - common)) for n in ns}
    held = {f: [n for n in ns if f in texts[n - 1]] for f in figs}
    held = {f: hs for f, hs in held.items() if hs}
    nums_units = _number_units(sentence)
    numbered = {n for n in ns if _holds_numbers(nums_units, _number_units(contents[n - 1]))}

    def evidence(n: int) -> tuple[int, int, float, float]:
        return (sum(n in hs for hs in held.values()), n in numbered, distinct[n], support[n])

    def holds(n: int) -> bool:
        if held:
            return evidence(n)[0] > 0
        return n in numbered or support[n] >= MIN_SUPPORT

    kept = [n for n in cited if holds(n)]
    for hs in held.values():  # a figure some chunk holds but no kept citation does: cite its best holder
        if not any(n in kept for n in hs):
            kept.append(max(hs, key=lambda n: (evidence(n), -n)))
    best = max(ns, key=lambda n: (evidence(n), -n)) if docs else None
    if not kept and best is not None and holds(best):
        kept = [best]
    if len(kept) > 1:  # several chunks hold it: keep the best, and each other that adds facts the kept ones lack
        covered: set[str] = set()
        figs_covered: set[str] = set()
        adding: list[int] = []
        for n in sorted(kept, key=lambda n: (evidence(n), -n), reverse=True):
            figs_n = {f for f, hs in held.items() if n in hs}
            if not adding or len(own[n] - covered) >= MIN_NEW_UNITS or figs_n - figs_covered:
                adding.append(n)
                covered |= own[n]
                figs_covered |= figs_n
        kept = [n for n in kept if n in adding]
    if not kept:
        originals = [d.page_content for d in docs]
        if contents != originals and check_sentence(sentence, docs, None, originals)["status"] != "unsupported":
            # held only by text that speaks to the assistant: the answer repeats an instruction planted in a chunk
            return {**out, "sources": [], "status": "unsupported", "planted": True}
        return {**out, "sources": [], "status": "unsupported"}
    status = "ok" if kept == cited else ("added" if not cited else "corrected")
    return {**out, "sources": kept, "status": status}


def check_citations(answer: str, docs: list[Document]) -> list[dict[str, Any]]:
    """`check_sentence` for every sentence of `answer`.

    A sentence that is only a citation ("Source: [3]", "来源：[1]") cites for the sentence with facts before it (the
    one after it when it comes first): its citations are kept only where that chunk holds that sentence's facts, and
    in an answer without a sentence of facts they are not counted as sources."""
    contents = [strip_instructions(d.page_content) for d in docs]
    texts = [_squash(c) for c in contents]
    checked = [check_sentence(s, docs, texts, contents) for s in sentences(answer)]
    factual = [i for i, c in enumerate(checked) if c["status"] != "no_facts"]
    for i, c in enumerate(checked):
        if c["status"] != "no_facts" or not c["cited"] or not _citation_only(c["sentence"]):
            continue
        if not factual:  # an answer of markers alone ("[1] [2]") states nothing to cite a chunk for
            checked[i] = {**c, "sources": []}
            continue
        ref = max((j for j in factual if j < i), default=min(factual))
        facts = CITATION_MARK.sub("", checked[ref]["sentence"])
        markers = " ".join(f"[{n}]" for n in c["cited"])
        holding = [n for n in check_sentence(f"{facts} {markers}", docs, texts, contents)["sources"]
                   if n in c["cited"]]
        checked[i] = {**c, "sources": holding, "status": "ok" if holding == c["cited"] else "corrected"}
    return checked


_LABEL = re.compile(r"(?:(?:the\s+)?(?:sources?|references?|citations?|cited|see)|来源|资料|出处|参考(?:资料)?|引用|依据)?",
                    re.I)


def _citation_only(sentence: str) -> bool:
    """Whether a sentence is just citation markers, perhaps after a label ("Source:", "来源："); a short answer
    phrase before a marker ("竹子 [1]") is not a label.

    >>> [_citation_only(s) for s in ("Source: [3]", "资料：[1]", "[1] [2]", "竹子 [1]", "7420 [1]")]
    [True, True, True, False, False]
    """
    rest = CITATION_MARK.sub("", sentence).strip(" \t\n.。:：;；,，()（）")
    return _LABEL.fullmatch(rest) is not None


def planted(citations: list[dict[str, Any]]) -> bool:
    """Whether a sentence of the answer is held only by text that speaks to the assistant (`check_sentence`'s
    ``planted``): the model repeated an instruction written into a retrieved document.

    >>> planted([{"status": "ok"}, {"status": "unsupported", "planted": True}]), planted([{"status": "ok"}])
    (True, False)
    """
    return any(c.get("planted") for c in citations)


def nothing_held(citations: list[dict[str, Any]]) -> bool:
    """Whether an answer states facts and no retrieved chunk holds any of them: every checked sentence with facts is
    ``unsupported`` (`check_citations`). Such an answer came from elsewhere than the chunks (the model's memory, an
    instruction it followed), so it cannot be called supported, whatever the gate said.

    >>> nothing_held([{"status": "unsupported"}, {"status": "no_facts"}]), nothing_held([{"status": "ok"}])
    (True, False)
    """
    factual = [c for c in citations if c.get("status") != "no_facts"]
    return bool(factual) and all(c.get("status") == "unsupported" for c in factual)


def map_citations(answer: str, docs: list[Document], *, check: bool = True) -> dict[str, Any]:
    """Citations in `answer` mapped to the numbered `docs`, each sentence's checked (`check_citations`).

    ``sources``: the chunks the answer's sentences rest on after the check, in order of first use; one the model did
    not cite itself (added or corrected by the check) is marked ``"inferred": True``. A source cited by its name in
    brackets ("[Deployment Guide]") counts as cited (`named_citations`). ``invalid_citations``: numbers that match no
    source. ``citations``: one entry per sentence (``sentence``, ``cited``, ``sources``, ``status``); a cited chunk
    that does not hold its sentence's facts is dropped there (``corrected``), a sentence no chunk holds is
    ``unsupported``. ``check=False`` keeps the model's own citations unchecked (documents cited by their summaries,
    which paraphrase rather than quote), with ``citations`` empty."""
    nums = cited_numbers(answer)
    valid = [n for n in nums if 1 <= n <= len(docs)]
    named = [n for n in named_citations(answer, docs) if n not in valid]
    checked = check_citations(answer, docs) if docs and check else []
    used: list[int] = [] if check else list(valid)
    for c in checked:
        used += [n for n in c["sources"] if n not in used]
    if named and not valid:
        used = named + [n for n in used if n not in named]
    own = set(valid) | set(named)
    sources = [source_entry(n, docs[n - 1]) if n in own else dict(source_entry(n, docs[n - 1]), inferred=True)
               for n in used]
    return {"sources": sources, "invalid_citations": [n for n in nums if n not in valid], "citations": checked}
