"""Short-answer metrics: exact match and F1 as the official CMRC 2018 (Chinese) and SQuAD v1.1 (English) scripts
compute them, best over the reference answers, plus key-fact coverage and "do the cited chunks hold the answer".

- Chinese (a reference with CJK characters), CMRC 2018: lower-case, CMRC's punctuation list (plus ASCII and
  full-width brackets/punctuation, which the model writes and DRCD's references do not) removed; EM = equal
  strings; F1 from the *longest common substring* of the mixed segmentations (one token per CJK character, words for
  Latin runs; CMRC's ``nltk.word_tokenize`` is replaced by a regex word split, the same on plain words and numbers).
- English, SQuAD v1.1: lower-case, punctuation and articles removed, white space collapsed; EM = equal strings; F1 from
  the bag of shared tokens.
- Before scoring, `[n]` citation markers are removed from the prediction: they are ctxrag's output format, not part of
  the answer.

Example::

    from ctxrag.evaluation.answer_metrics import exact_match, f1_score
    f1_score("Eiffel Tower in Paris [1]", ["Eiffel Tower"])        # 0.667 (SQuAD tokens)
    f1_score("台北市", ["台北"]), exact_match("台北。", ["台北"])      # (0.8, 1.0) (CMRC characters)
"""
from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_CITATION = re.compile(r"\[\d{1,3}(?:\s*[,，、]\s*\d{1,3})*\]")
_CJK = re.compile(r"[\u4e00-\u9fa5]")
# the CMRC 2018 script's list, plus the full-width forms DRCD uses ("，" is in it already)
_CMRC_PUNCT = set("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』") | {"……"} | set("?!,.;()\"'<>[]【】")
_SQUAD_PUNCT = set(string.punctuation)
_LATIN_WORD = re.compile(r"\w+|[^\w\s]")


def strip_citations(answer: str) -> str:
    """The answer without its `[n]` / `[1, 2]` citation markers."""
    return re.sub(r"\s{2,}", " ", _CITATION.sub("", answer)).strip()


def is_chinese(text: str) -> bool:
    """True when the text has CJK characters: it is then scored the CMRC way."""
    return bool(_CJK.search(text))


# ---------------------------------------------------------------- CMRC 2018


def _cmrc_segments(text: str) -> list[str]:
    text = text.lower().strip()
    out: list[str] = []
    run = ""
    for ch in text:
        if ch in _CMRC_PUNCT:
            continue
        if _CJK.match(ch):
            if run:
                out.extend(_LATIN_WORD.findall(run))
                run = ""
            out.append(ch)
        else:
            run += ch
    if run:
        out.extend(_LATIN_WORD.findall(run))
    return out


def _cmrc_strip(text: str) -> str:
    return "".join(ch for ch in text.lower().strip() if ch not in _CMRC_PUNCT)


def _longest_common_substring(a: Sequence[str], b: Sequence[str]) -> int:
    best = 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


def _cmrc_f1(prediction: str, reference: str) -> float:
    pred, ref = _cmrc_segments(prediction), _cmrc_segments(reference)
    common = _longest_common_substring(ref, pred)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------- SQuAD v1.1


def _squad_normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _SQUAD_PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _squad_f1(prediction: str, reference: str) -> float:
    pred, ref = _squad_normalize(prediction).split(), _squad_normalize(reference).split()
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------- public


def _references(references: Sequence[str] | str) -> list[str]:
    refs = [references] if isinstance(references, str) else [r for r in references if r and r.strip()]
    if not refs:
        raise ValueError("no reference answer to score against (empty list)")
    return refs


def exact_match(prediction: str, references: Sequence[str] | str) -> float:
    """1.0 when the normalised prediction equals a normalised reference (CMRC for Chinese, SQuAD for English)."""
    pred = strip_citations(prediction)
    for ref in _references(references):
        if is_chinese(ref):
            if _cmrc_strip(pred) == _cmrc_strip(ref):
                return 1.0
        elif _squad_normalize(pred) == _squad_normalize(ref):
            return 1.0
    return 0.0


def f1_score(prediction: str, references: Sequence[str] | str) -> float:
    """Best F1 over the references, in [0, 1] (CMRC's character LCS F1 for Chinese, SQuAD's token F1 for English)."""
    pred = strip_citations(prediction)
    return max(_cmrc_f1(pred, r) if is_chinese(r) else _squad_f1(pred, r) for r in _references(references))


def _loose(text: str) -> str:
    """Lower case without white space and punctuation: for "does this text contain that answer"."""
    return "".join(ch for ch in text.lower() if not ch.isspace() and ch not in _SQUAD_PUNCT and ch not in _CMRC_PUNCT)


def contains_answer(texts: Sequence[str], references: Sequence[str] | str) -> bool:
    """True when one of ``texts`` (the cited chunks) contains one of the references, ignoring case, space, punctuation."""
    refs = [_loose(r) for r in _references(references)]
    hay = [_loose(t) for t in texts]
    return any(r and r in h for r in refs for h in hay)


def key_fact_hits(answer: str, key_facts: Sequence[str | Sequence[str]]) -> list[bool]:
    """For each key fact (a string, or a list of equivalent spellings), whether the answer states it (loosely)."""
    text = _loose(strip_citations(answer))
    hits = []
    for fact in key_facts:
        spellings = [fact] if isinstance(fact, str) else list(fact)
        if not spellings or not all(isinstance(s, str) and s.strip() for s in spellings):
            raise ValueError(f"key fact {fact!r}: expected a non-empty string or a list of them")
        hits.append(any(_loose(s) in text for s in spellings))
    return hits
