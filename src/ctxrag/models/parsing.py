"""Forgiving parsers for small-LLM replies: JSON buried in prose, yes/no verdicts, numeric scores.

A 0.5B model wraps JSON in code fences, adds chatter, uses single quotes and trailing commas; these helpers recover
what they can and say plainly when there is nothing to recover.

Example::

    from ctxrag.models.parsing import extract_json, parse_yes_no, parse_number
    extract_json("Sure! ```json\\n{'score': 3,}\\n``` hope this helps")   # {'score': 3}
    parse_yes_no("Yes, the passage answers it.")                        # True
    parse_number("Relevance: 7/10", 0, 10)                             # 7.0
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}


def _excerpt(text: str, limit: int = 200) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def balanced_spans(text: str) -> list[str]:
    """Every top-level ``{...}`` / ``[...]`` span, bracket-balanced while respecting quoted strings."""
    spans: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        if text[i] not in "{[":
            i += 1
            continue
        end = _span_end(text, i)
        if end is None:
            i += 1
        else:
            spans.append(text[i : end + 1])
            i = end + 1
    return spans


def _span_end(text: str, start: int) -> int | None:
    """Index of the bracket closing the one at ``start``, or None when unbalanced."""
    stack: list[str] = []
    quote: str | None = None
    n = len(text)
    j = start
    while j < n:
        ch = text[j]
        if quote:
            if ch == "\\":
                j += 2
                continue
            if ch == quote and not (quote == "'" and _is_apostrophe(text, j)):
                quote = None
        elif ch == '"' or (ch == "'" and not _is_apostrophe(text, j)):
            quote = ch
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack[-1] != ch:
                return None
            stack.pop()
            if not stack:
                return j
        j += 1
    return None


def _is_apostrophe(text: str, j: int) -> bool:
    """An apostrophe inside a bare word (don't) is not a quote."""
    return 0 < j < len(text) - 1 and text[j - 1].isalnum() and text[j + 1].isalnum()


def _requote_single(candidate: str) -> str:
    """Turn single-quoted strings into double-quoted ones, escaping inner double quotes."""
    out: list[str] = []
    i = 0
    n = len(candidate)
    while i < n:
        ch = candidate[i]
        if ch == '"':
            j = i + 1
            while j < n and candidate[j] != '"':
                j += 2 if candidate[j] == "\\" else 1
            out.append(candidate[i : j + 1])
            i = j + 1
        elif ch == "'":
            j = i + 1
            buf: list[str] = []
            while j < n and (candidate[j] != "'" or _is_apostrophe(candidate, j)):
                if candidate[j] == "\\" and j + 1 < n:
                    buf.append(candidate[j : j + 2] if candidate[j + 1] != "'" else "'")
                    j += 2
                    continue
                buf.append('\\"' if candidate[j] == '"' else candidate[j])
                j += 1
            out.append('"' + "".join(buf) + '"')
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _repairs(candidate: str) -> list[str]:
    fixed = _TRAILING_COMMA.sub(r"\1", candidate)
    requoted = _TRAILING_COMMA.sub(r"\1", _requote_single(candidate))
    literal = re.sub(r"\b(True|False|None)\b", lambda m: _PY_LITERALS[m.group(1)], requoted)
    return [candidate, fixed, requoted, literal]


def _try_parse(candidate: str) -> tuple[bool, Any]:
    for attempt in _repairs(candidate):
        try:
            return True, json.loads(attempt)
        except ValueError:
            continue
    return False, None


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``.

    Looks inside code fences first, then anywhere in the text; repairs single quotes, trailing commas and Python
    literals (True/False/None). Raises ValueError quoting an excerpt of ``text`` when nothing parses.
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_json expects a str, got {type(text).__name__}")
    candidates: list[str] = []
    for match in _FENCE.finditer(text):
        body = match.group(2).strip()
        if body:
            candidates.append(body)
            candidates.extend(balanced_spans(body))
    candidates.extend(balanced_spans(text))
    stripped = text.strip()
    if stripped:
        candidates.append(stripped)
    for candidate in candidates:
        ok, value = _try_parse(candidate)
        if ok and isinstance(value, (dict, list)):
            return value
    raise ValueError(f"no JSON object or array found in LLM reply {_excerpt(text)}")


_YES = {"yes", "y", "true", "relevant", "correct", "supported", "是", "是的", "对", "相关", "正确"}
_NO = {"no", "n", "false", "irrelevant", "not", "incorrect", "unsupported", "否", "不是", "不", "不相关", "错误"}
_WORD = re.compile(r"[A-Za-z]+|[\u4e00-\u9fff]+")


def parse_yes_no(text: str) -> bool | None:
    """The verdict at the start of a reply: True for yes, False for no, None when it is neither or says both.

    Reads the first word (English or Chinese), so "Yes, but not fully" is True and "No. Yes would be wrong" is False;
    a JSON reply like ``{"relevant": "yes"}`` is understood too.
    """
    if not text or not text.strip():
        return None
    try:
        value = extract_json(text)
    except ValueError:
        value = None
    if isinstance(value, dict) and len(value) == 1:
        (inner,) = value.values()
        if isinstance(inner, bool):
            return inner
        if isinstance(inner, str):
            return parse_yes_no(inner)
    for word in _WORD.findall(text.strip()[:80]):
        lower = word.lower()
        if lower in {"answer", "verdict", "output", "result", "response", "relevance", "a", "the", "final"}:
            continue
        if lower in _YES:
            return True
        if lower in _NO:
            return False
        # Chinese runs have no spaces: look at their start
        for zh in ("不相关", "不是", "是的", "相关", "是", "对", "否", "不"):
            if word.startswith(zh):
                return zh in _YES
        return None
    return None


_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def parse_number(text: str, lo: float, hi: float) -> float | None:
    """The first number in ``text`` that lies in ``[lo, hi]``, or None.

    "Score: 8/10" gives 8.0 (the "/10" scale is skipped); out-of-range numbers ("I rate it 15") are passed over.
    """
    if lo > hi:
        raise ValueError(f"parse_number: lo={lo} is greater than hi={hi}")
    if not text:
        return None
    for match in _NUMBER.finditer(text):
        if match.start() > 0 and text[match.start() - 1] == "/":
            continue  # the scale in "8/10"
        try:
            value = float(match.group())
        except ValueError:
            continue
        if math.isfinite(value) and lo <= value <= hi:
            return value
    return None
