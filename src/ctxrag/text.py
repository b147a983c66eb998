"""Tiny text helpers shared by several stages: language and query-kind detection, a cheap token estimate and an
extractive summary.

Example::

    from ctxrag.text import detect_kind, detect_language, estimate_tokens, extractive_summary
    detect_language("使用 LangChain 构建检索增强生成系统")  # 'zh'
    detect_kind("What does DiffExecutor do?")  # 'code'
    estimate_tokens("hello world")  # 3
    extractive_summary("端口", "# 端口\n默认端口是 7420。可以在配置中修改。")  # '端口: 默认端口是 7420。可以在配置中修改。'
"""
from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
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


# a name as code writes it: `backticked`, camelCase / PascalCase with an inner capital, snake_case, a::path, call()
_CODE_NAME = re.compile(r"`[^`\n]+`|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z0-9]+[A-Z]\w*|\b[A-Za-z][A-Za-z0-9]*_\w+|\w+::\w+"
                        r"|\b\w+\(\)")


def detect_kind(text: str) -> Literal["zh", "code", "en"]:
    """'zh' when `detect_language` says so; else 'code' when the text names something as code does (a backticked
    span, ``camelCase``, ``PascalCase`` with an inner capital, ``snake_case``, ``a::path``, ``call()``); else 'en'.

    >>> detect_kind("What does the `run_target` method do?"), detect_kind("Who founded the city?")
    ('code', 'en')
    >>> detect_kind("DiffExecutor 是做什么的？")
    'zh'
    """
    if detect_language(text) == "zh":
        return "zh"
    return "code" if _CODE_NAME.search(text[:_SAMPLE_CHARS]) else "en"


def estimate_tokens(text: str, chars_per_token: float = 4.0) -> int:
    """Approximate token count without a tokenizer: one per CJK character, `chars_per_token` characters per token else."""
    cjk = count_cjk(text)
    rest = len(text) - cjk
    return cjk + int(-(-rest // chars_per_token))  # ceil


EXTRACTIVE_CHARS = 240
"""Length cap of an extractive summary (title excluded)."""

_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|(?<=\.)\s")
_MARKUP = re.compile(r"^[#>*\-\s|`]+|[*_`]+", re.MULTILINE)


def extractive_summary(title: str, text: str, max_chars: int = EXTRACTIVE_CHARS) -> str:
    """Title plus the first sentences of `text` up to about `max_chars` characters (deterministic, no model): the
    document catalog's summary when no model wrote one, and the summarizer's fallback."""
    body = _MARKUP.sub("", text)
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    if lines and lines[0] == title.strip():
        lines = lines[1:]
    flat = " ".join(lines)
    parts = [p.strip() for p in _SENTENCE_END.split(flat) if p and p.strip()]
    out = ""
    for p in parts:
        if len(out) + len(p) > max_chars and out:
            break
        out = f"{out} {p}".strip() if out and not out.endswith(tuple("。！？；")) else out + p
    out = out[: max_chars + 40]
    return f"{title.strip()}: {out}" if title.strip() else out


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


# common characters written differently in Traditional and Simplified Chinese (Traditional first in each pair)
_HANT_HANS = (
    "們们這这個个來来說说時时會会為为與与對对開开關关學学國国過过還还發发當当點点無无經经門门問问長长見见車车東东"
    "書书實实灣湾區区華华歷历麼么從从體体電电話话間间現现種种樣样機机動动產产業业專专義义議议認认頭头陽阳戰战歲岁"
    "萬万億亿衛卫術术總总線线聯联證证讀读寫写語语員员處处號号辦办單单級级隊队團团廣广島岛鐵铁將将藝艺畫画數数據据"
    "權权屬属際际報报軍军類类領领選选傳传維维變变興兴農农醫医藥药營营質质達达設设計计論论記记並并擇择幾几誰谁於于嗎吗換换鄉乡顆颗費费倫伦龍龙蘇苏條条約约註注溫温頒颁軟软舊旧賀贺築筑萊莱漢汉鄰邻獲获稱称羅罗亞亚歐欧爾尔蘭兰馬马鳥鸟魚鱼齊齐邊边穩稳環环軌轨圓圆"
)
_HANT = set(_HANT_HANS[0::2])
_HANS = set(_HANT_HANS[1::2])


def is_traditional_chinese(text: str) -> bool:
    """True when the text uses more Traditional-only than Simplified-only characters (of ~140 common pairs).

    >>> is_traditional_chinese("臺灣的首都在哪裡？"), is_traditional_chinese("团队版包含多少存储空间？")
    (True, False)
    """
    sample = text[:_SAMPLE_CHARS]
    hant = sum(1 for ch in sample if ch in _HANT)
    hans = sum(1 for ch in sample if ch in _HANS)
    return hant > hans


def to_simplified(text: str) -> str:
    """Traditional Chinese characters converted to Simplified (others unchanged), by OpenCC's ``t2s``.

    >>> to_simplified("為什麼臺灣")
    '为什么台湾'
    """
    return _t2s()(text)


@lru_cache(maxsize=1)
def _t2s() -> Callable[[str], str]:
    import opencc  # a dependency; imported on first use, not at import time

    return opencc.OpenCC("t2s").convert
