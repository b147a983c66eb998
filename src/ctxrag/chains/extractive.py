"""Snap a short answer to the span of a retrieved chunk it was read from.

A small model asked for "the answer phrase, copied from the sources" often writes it in its own form: Simplified
characters for a Traditional source, a word dropped or added, a different bracket. The short answer step
(`ctxrag.chains.short_answer.ExtractiveAnswer`, optional in `build_rag_chain`) returns the source's own span
instead, so an extractive answer can be quoted and checked: first the phrase itself, compared character by
character after folding case and Traditional to Simplified script (a 1:1 mapping, so the original characters are
returned), or a number in digits spelled out in Chinese (30 -> 三十, `chinese_numerals`); otherwise the span of a
chunk with the best overlap F1 with the phrase (characters for Chinese, words otherwise, as CMRC / SQuAD score),
when that F1 is at least ``min_f1`` and the span holds at least half of the phrase's units (a short span sharing a digit or two with a
wrong phrase is no match). Nothing is snapped when no span is close enough: the model's phrase is kept.

Given the question, a span in Chinese is then fitted to what the question asks for (`fit_to_question`): a number or
name keeps the measure word or type the question names right after its question word (幾所 -> "14所", 哪一個縣 ->
"臺東縣", 第幾名 -> "第7名"), and a full date is cut to its year when the question asks which year. A span that opens a
bracket pair and stops before its other half gets it (``《煙臺條約`` -> ``《煙臺條約》``).

>>> from langchain_core.documents import Document
>>> snap("台湾最高的山是玉山", [Document("雪山在臺中。"), Document("臺灣最高的山是玉山，海拔3952公尺。")])
Snapped(text='臺灣最高的山是玉山', n=2, f1=1.0)
>>> snap("Mount Everest", [Document("The highest mountain is Everest, in Nepal.")])
Snapped(text='Everest', n=1, f1=0.6666666666666666)
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from langchain_core.documents import Document

from ctxrag.chains.citations import CITATION_MARK
from ctxrag.text import count_cjk, to_simplified

# wrappers around the phrase that are not part of it
_LEAD = re.compile(r"^\s*(?:答案|答|answer)\s*[:：是为為]\s*", re.IGNORECASE)
_EDGE = "\"'“”‘’「」『』《》()（）[]【】.,;:!?。，；：！？、 \t\n"
_PUNCT = set(_EDGE) | set("-–—·・/…")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


# the question word, an optional classifier, then the type of answer asked for (kept after a span that lacks it)
_ASKED = re.compile(r"(?:第幾|第几|幾|几|多少|哪一|哪|何)(?:個|个|種|种|位|座|條|条|家|款|項|项)?([\u4e00-\u9fff]{1,2})")
_ASKED_BARE = re.compile(r"(?:第幾|第几|幾|几|多少|哪一|哪|何)([\u4e00-\u9fff]{1,2})")
_NOT_A_TYPE = set("時时的是在了")
_YEAR_ASKED = re.compile(r"(?:哪一|哪|何|幾|几|那一|多少)年(?!代)")
_YEAR_FIRST = re.compile(r"^[0-9０-９零〇一二三四五六七八九十百千]{1,5}年(?!代)")


@dataclass(frozen=True)
class Snapped:
    """A span of chunk ``n`` (numbered from 1) standing for the answer, and its overlap F1 with the answer."""

    text: str
    n: int
    f1: float


def clean_phrase(answer: str) -> str:
    """The answer phrase without `[n]` markers, a leading "答案：" / "Answer:" and surrounding quotes or punctuation.

    >>> clean_phrase("答案：「玉山」 [2]")
    '玉山'
    """
    return _LEAD.sub("", CITATION_MARK.sub("", answer)).strip(_EDGE)


@lru_cache(maxsize=65536)
def _fold(ch: str) -> str:
    """One character folded for comparison: lower case, Simplified script; always one character."""
    low = ch.lower()
    if len(low) != 1:
        return ch
    if "\u3400" <= low <= "\u9fff":
        simple = to_simplified(low)
        return simple if len(simple) == 1 else low
    return low


def _folded(text: str) -> str:
    return "".join(_fold(c) for c in text)


def _units(text: str, cjk: bool) -> list[tuple[str, int, int]]:
    """Scoring units with their (start, end) offsets: non-space, non-punctuation characters for Chinese, words
    otherwise."""
    if cjk:
        return [(c, i, i + 1) for i, c in enumerate(text) if not c.isspace() and c not in _PUNCT]
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def _best_span(answer_units: Counter[str], text: str, cjk: bool, max_len: int) -> tuple[float, int, int]:
    """The span of ``text`` (folded) with the best unit-overlap F1 with the answer, among spans holding at least half
    of the answer's units: (f1, start, end) in characters.

    Only spans that start and end on a unit of the answer can be best, so only those are tried."""
    units = _units(text, cjk)
    total = sum(answer_units.values())
    best = (0.0, 0, 0)
    for i, (u, start, _) in enumerate(units):
        if u not in answer_units:
            continue
        seen: Counter[str] = Counter()
        common = 0
        for j in range(i, min(len(units), i + max_len)):
            v = units[j][0]
            seen[v] += 1
            if seen[v] <= answer_units.get(v, 0):
                common += 1
            if v in answer_units and 2 * common >= total:
                f1 = 2 * common / (j - i + 1 + total)
                if f1 > best[0] + 1e-9:
                    best = (f1, start, units[j][2])
    return best


@lru_cache(maxsize=4096)
def _is_word(text: str) -> bool:
    """Whether jieba's dictionary knows `text` as a word (Traditional folded to Simplified): "植物" yes, "所高" no."""
    import jieba

    jieba.dt.check_initialized()
    return bool(jieba.dt.FREQ.get(text, 0) > 0 or jieba.dt.FREQ.get(to_simplified(text), 0) > 0)


def echoes_question(answer: str, question: str) -> bool:
    """Whether a short answer only repeats words of the question (compared after folding case and script).

    >>> echoes_question("寄养家庭", "童年的寄養家庭以及哪方面的經驗是風險因素？"), echoes_question("性虐待", "同上？")
    (True, False)
    """
    phrase = clean_phrase(answer)
    return bool(phrase) and _folded(phrase) in _folded(question)


_EN_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_CJK_RUN = re.compile(r"[\u3400-\u9fff]+")


def names_one_of(answer: str, names: Sequence[str]) -> str | None:
    """The first of ``names`` (short strings, e.g. a multi-hop chain's searches) that holds the answer phrase: its
    CJK characters as a substring, or its English words as a run of whole words (folded case and script); None when
    none does.

    >>> names_one_of("Mexico [3]", ["Mexico political party of Sergio Tolento", "Sonora"])
    'Mexico political party of Sergio Tolento'
    >>> names_one_of("Mex", ["Mexico"]) is None, names_one_of("墨西哥", ["墨西哥的政党"])
    (True, '墨西哥的政党')
    """
    phrase = _folded(clean_phrase(answer))
    if not phrase:
        return None
    if count_cjk(phrase):
        return next((n for n in names if phrase in _folded(n)), None)
    words = _EN_WORD.findall(phrase)
    if not words:
        return None
    for name in names:
        held = _EN_WORD.findall(_folded(name))
        if any(held[i:i + len(words)] == words for i in range(len(held) - len(words) + 1)):
            return name
    return None


def _question_units(text: str) -> list[str]:
    """Folded English words and CJK character bigrams: what `restates_question` compares."""
    text = _folded(text)
    grams = _EN_WORD.findall(text)
    for run in _CJK_RUN.findall(text):
        grams += [run[i : i + 2] for i in range(len(run) - 1)] or [run]
    return grams


def restates_question(answer: str, question: str) -> bool:
    """Whether a short answer is a sentence built on the question (at least 5 English words or 10 CJK characters,
    at least half of its words / CJK bigrams taken from the question) rather than the phrase asked for.

    >>> q = "What is the debt load for the US carried by the country Dai Jitao is from?"
    >>> restates_question("Dai Jitao is from China.", q), restates_question("about $1.18 trillion", q)
    (True, False)
    >>> restates_question("中央革命軍事委員會副主席", "周恩來任職中央革命軍事委員會中的哪一個職位?")
    True
    """
    phrase = clean_phrase(answer)
    if count_cjk(phrase) < 10 and len(_EN_WORD.findall(phrase.lower())) < 5:
        return False
    units = _question_units(phrase)
    asked = set(_question_units(question))
    return bool(units) and 2 * sum(u in asked for u in units) >= len(units)


def fit_to_question(text: str, start: int, end: int, question: str) -> tuple[int, int]:
    """The span ``text[start:end]`` fitted to a Chinese question (see the module docstring); unchanged otherwise.

    >>> src = "楊浦區有14所高等院校，2003年7月設立。"
    >>> [src[a:b] for a, b in (fit_to_question(src, 4, 6, "楊浦區有幾所高校？"),
    ...                        fit_to_question(src, 12, 19, "在哪一年設立？"))]
    ['14所', '2003年']
    """
    if not question or count_cjk(question) == 0:
        return start, end
    asked = [m.group(1) for rx in (_ASKED, _ASKED_BARE) for m in rx.finditer(question)]
    span = text[start:end]
    kinds = {k if len(k) == 2 and _is_word(k) else k[:1] for k in asked}  # "年號" stays whole, "所高" -> "所"
    for kind in sorted(kinds, key=len, reverse=True):
        if kind[0] in _NOT_A_TYPE or span.endswith(kind):
            continue
        if text.startswith(kind, end):
            end += len(kind)
            break
    if start > 0 and text[start - 1] == "第" and ("第幾" in question or "第几" in question):
        start -= 1
    span = text[start:end]
    year = _YEAR_FIRST.match(span)
    if year and year.end() < len(span) and _YEAR_ASKED.search(question) and not re.search("[月日]", question):
        end = start + year.end()
    return start, end


_PAIRS = {"《": "》", "「": "」", "『": "』", "（": "）", "(": ")", "“": "”", "【": "】"}
_DIGITS = "零一二三四五六七八九"


def _balanced(text: str, start: int, end: int) -> tuple[int, int]:
    """The span widened by one character on a side where it opens or closes a bracket pair it lacks the other half
    of and the text holds that half right there (``中英《煙臺條約`` -> ``中英《煙臺條約》``)."""
    span = text[start:end]
    for left, right in _PAIRS.items():
        if span.count(left) > span.count(right) and text.startswith(right, end):
            end += 1
        elif span.count(right) > span.count(left) and start > 0 and text[start - 1] == left:
            start -= 1
    return start, end


def chinese_numerals(digits: str) -> list[str]:
    """Chinese forms of a number written in digits, for a source that spells it out: 30 -> 三十, 1936 -> 一千九百三十六
    and 一九三六 (years are read digit by digit).

    >>> chinese_numerals("30"), chinese_numerals("105"), chinese_numerals("12")
    (['三十'], ['一百零五'], ['十二', '一十二'])
    """
    if not digits.isascii() or not digits.isdigit() or not 0 < int(digits) < 10000:
        return []
    n = int(digits)
    out, zero = "", False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d, n = divmod(n, value)
        if d:
            out += ("零" if zero and out else "") + _DIGITS[d] + unit
            zero = False
        elif out:
            zero = True
    forms = [out[1:], out] if out.startswith("一十") else [out]
    if len(digits) == 4:
        forms.append("".join(_DIGITS[int(c)] for c in digits).replace("零", "〇"))
    return forms


def _exact(key: str, texts: list[str], folded: list[str], question: str, strict: bool = False) -> Snapped | None:
    """The phrase's first occurrence in the chunks, preferring one not inside a longer number ("7" in "700") and
    then one the question's answer type fits ("7" of "第7名" for 第幾名); with ``strict``, only one not inside a
    longer number (for the Chinese spelling of a number: "三" in "三百" is no match)."""
    first: Snapped | None = None
    whole: Snapped | None = None
    for n, text in enumerate(folded, 1):
        at = text.find(key)
        while at >= 0:
            end = at + len(key)
            start, stop = _balanced(texts[n - 1], *fit_to_question(texts[n - 1], at, end, question))
            hit = Snapped(texts[n - 1][start:stop], n, 1.0)
            first = first or hit
            inside_number = (key[0].isnumeric() and at > 0 and text[at - 1].isnumeric()) or (
                key[-1].isnumeric() and end < len(text) and text[end].isnumeric())
            if not inside_number:
                if (start, stop) != (at, end):
                    return hit
                whole = whole or hit
            at = text.find(key, at + 1)
    return whole if strict else whole or first


def snap(answer: str, docs: Sequence[Document], *, question: str = "", min_f1: float = 0.6) -> Snapped | None:
    """The source span for a short answer (see the module docstring), or None when none is close enough; with the
    `question`, a Chinese span is fitted to it (`fit_to_question`)."""
    if not 0 < min_f1 <= 1:
        raise ValueError(f"min_f1 must be in (0, 1], got {min_f1!r}")
    phrase = clean_phrase(answer)
    if not phrase:
        return None
    key = _folded(phrase)
    texts = [d.page_content for d in docs]
    folded = [_folded(t) for t in texts]  # same length as the text: offsets carry over
    for form in [key, *chinese_numerals(key)]:
        found = _exact(form, texts, folded, question, strict=form != key)
        if found is not None:
            return found
    cjk = count_cjk(phrase) > 0
    answer_units = Counter(u for u, _, _ in _units(key, cjk))
    if not answer_units:
        return None
    max_len = 2 * sum(answer_units.values()) + 4
    best: tuple[float, int, int, int] = (0.0, 0, 0, 0)
    for n, text in enumerate(folded, 1):
        f1, start, end = _best_span(answer_units, text, cjk, max_len)
        if f1 > best[0] + 1e-9:
            best = (f1, n, start, end)
    f1, n, start, end = best
    if f1 < min_f1:
        return None
    start, end = _balanced(texts[n - 1], *fit_to_question(texts[n - 1], start, end, question))
    return Snapped(texts[n - 1][start:end], n, f1)
