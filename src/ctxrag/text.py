"""Tiny text helpers shared by several stages: language detection and a cheap token estimate.

Example::

    from ctxrag.text import detect_language, estimate_tokens
    detect_language("使用 LangChain 构建检索增强生成系统")  # 'zh'
    estimate_tokens("hello world")  # 3
"""
from __future__ import annotations

import re
from typing import Literal

from ctxrag.errors import QueryError

# CJK Unified Ideographs (+ Extension A, compatibility), kana and Hangul: one token-ish each.
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")
_SAMPLE_CHARS = 20_000


def count_cjk(text: str) -> int:
    """Number of CJK (Chinese, Japanese kana, Hangul) characters in `text`."""
    return len(_CJK.findall(text))


def detect_language(text: str) -> Literal["zh", "en"]:
    """'zh' when the text is mostly CJK, else 'en'.

    One CJK character carries about as much as one Latin word, so CJK characters are weighed against Latin *words*
    (a Chinese sentence full of English product names stays 'zh'). Only the first 20,000 characters are read.
    """
    sample = text[:_SAMPLE_CHARS]
    cjk = count_cjk(sample)
    return "zh" if cjk > 0 and cjk >= len(_LATIN_WORD.findall(sample)) else "en"


def estimate_tokens(text: str, chars_per_token: float = 4.0) -> int:
    """Approximate token count without a tokenizer: one per CJK character, `chars_per_token` characters per token else."""
    cjk = count_cjk(text)
    rest = len(text) - cjk
    return cjk + int(-(-rest // chars_per_token))  # ceil


def check_query(query: object, max_chars: int, *, what: str = "query") -> str:
    """`query` stripped, or `QueryError` when it is not a string, is blank, or is longer than `max_chars`.

    >>> check_query("  默认端口？ ", 4000)
    '默认端口？'
    """
    if not isinstance(query, str) or not query.strip():
        raise QueryError(f"need a non-empty {what} string, got {query!r:.200}")
    if len(query) > max_chars:
        raise QueryError(f"the {what} is too long ({len(query):,} characters, limit {max_chars:,}; "
                         "setting max_query_chars, env CTXRAG_MAX_QUERY_CHARS)")
    return query.strip()
