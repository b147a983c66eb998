"""Turn the bytes of a text file into `str`, detecting its encoding.

Order of trust: a byte-order mark, then strict UTF-8, then the two Chinese legacy encodings (GB18030, which
covers GBK/GB2312, and Big5) scored by how many decoded characters are *common* Hanzi, then Western cp1252 only
when every non-ASCII character is a letter inside a word (``Café``, ``naïve``), then charset-normalizer for
Shift_JIS / EUC-JP / EUC-KR only when it decodes without chaos to mostly kana, Hangul or Hanzi. Bytes that none of
these explains with confidence raise `LoadError` naming the byte offset of the first invalid UTF-8 byte, so
mojibake (``ÿþú``) never reaches the index.
"""
from __future__ import annotations

import codecs
import re
from functools import lru_cache
from pathlib import Path

from charset_normalizer import from_bytes

from ctxrag.errors import LoadError

_BOMS: tuple[tuple[bytes, str], ...] = (
    # UTF-32 first: its little-endian BOM starts with the UTF-16 one
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Candidates for charset-normalizer once UTF-8 and the Chinese encodings failed; no single-byte catch-all
# (latin-1 decodes any byte string), so random bytes still fail.
_FALLBACK_ENCODINGS = ["shift_jis", "euc_jp", "euc_kr"]
_CJK_OR_KANA = re.compile(r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef]")
# cp1252 is believed only for words like "Café": a Latin letter run of at most 2 touching an ASCII letter
_CP1252_WORD = re.compile(r"(?<=[A-Za-z])[\u00c0-\u00ff\u0152\u0153\u0160\u0161\u0178\u017d\u017e]{1,2}"
                          r"|[\u00c0-\u00ff\u0152\u0153\u0160\u0161\u0178\u017d\u017e]{1,2}(?=[A-Za-z])")
_CP1252_PUNCTUATION = frozenset("\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u20ac\u00a0\u00b0\u00a9\u00ae\u00a3")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
# Full-width punctuation a Chinese text uses; kana, symbols or private-use characters from a wrong decoding do not count
_COMMON_PUNCTUATION = frozenset("，。、；：？！“”‘’（）《》【】「」『』…—·～　％＋－＝")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_MIN_COMMON_HANZI = 0.8
_MAX_CONTROL_RATIO = 0.01


@lru_cache(maxsize=1)
def _common_hanzi() -> frozenset[str]:
    """GB2312 level 1 (3755 most used simplified) plus Big5 level 1 (5401 most used traditional) Hanzi."""
    chars: set[str] = set()
    for lead in range(0xB0, 0xD8):
        for trail in range(0xA1, 0xFF):
            try:
                chars.add(bytes((lead, trail)).decode("gb2312"))
            except UnicodeDecodeError:
                pass
    for lead in range(0xA4, 0xC7):
        for trail in list(range(0x40, 0x7F)) + list(range(0xA1, 0xFF)):
            try:
                chars.add(bytes((lead, trail)).decode("big5"))
            except UnicodeDecodeError:
                pass
    return frozenset(chars)


def _common_hanzi_ratio(text: str) -> float:
    chars = _NON_ASCII.findall(text)
    if not chars:
        return 0.0
    common = _common_hanzi()
    return sum(ch in common or ch in _COMMON_PUNCTUATION for ch in chars) / len(chars)


def _chinese_guess(data: bytes) -> str | None:
    """GB18030 or Big5, whichever decodes strictly to mostly common Hanzi/punctuation (GB18030 wins ties)."""
    best: tuple[float, str] | None = None
    for encoding in ("gb18030", "big5"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        ratio = _common_hanzi_ratio(text)
        if ratio >= _MIN_COMMON_HANZI and (best is None or ratio > best[0]):
            best = (ratio, encoding)
    return best[1] if best else None


def _western_guess(data: bytes) -> str | None:
    """cp1252 when every non-ASCII character it decodes to is a letter inside a word or common punctuation."""
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    rest = _CP1252_WORD.sub("", text)
    return "cp1252" if all(ch in _CP1252_PUNCTUATION for ch in _NON_ASCII.findall(rest)) else None


def _east_asian_guess(data: bytes) -> str | None:
    """Shift_JIS / EUC-JP / EUC-KR when charset-normalizer decodes without chaos to mostly kana, Hangul or Hanzi."""
    match = from_bytes(data, cp_isolation=_FALLBACK_ENCODINGS).best()
    if match is None or match.percent_chaos > 0:
        return None
    chars = _NON_ASCII.findall(str(match))
    if not chars or sum(bool(_CJK_OR_KANA.match(ch)) for ch in chars) / len(chars) < _MIN_COMMON_HANZI:
        return None
    return match.encoding


def looks_binary(data: bytes) -> bool:
    """True when the bytes hold a NUL (no text encoding we accept without a BOM produces one)."""
    return b"\x00" in data


def decode_bytes(data: bytes, path: Path | str = "<bytes>") -> tuple[str, str]:
    """Decode file bytes; return ``(text, encoding)``. Raises `LoadError` for binary or undecodable bytes.

    >>> decode_bytes("星河".encode("gbk"))
    ('星河', 'gb18030')
    """
    encoding: str | None = None
    for bom, name in _BOMS:
        if data.startswith(bom):
            encoding = name
            data = data[len(bom):]
            break
    if encoding is None:
        if looks_binary(data):
            raise LoadError(path, "binary file (contains NUL bytes), not text")
        try:
            text = data.decode("utf-8")
            encoding = "utf-8"
        except UnicodeDecodeError as exc:
            encoding = _chinese_guess(data) or _western_guess(data) or _east_asian_guess(data)
            if encoding is None:
                raise LoadError(
                    path,
                    f"invalid bytes: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}: {exc.reason}) "
                    "and no legacy encoding (GB18030/GBK, Big5, UTF-16/32 with BOM, Western cp1252, Shift_JIS, "
                    "EUC-JP/KR) explains it with confidence; convert the file to UTF-8",
                ) from None
            text = data.decode(encoding)
    else:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise LoadError(path, f"invalid bytes for {encoding} (declared by its byte-order mark): {exc.reason} at offset {exc.start}") from None
    if text and len(_CONTROL.findall(text)) / len(text) > _MAX_CONTROL_RATIO:
        raise LoadError(path, f"binary file: too many control characters after decoding as {encoding}")
    return text, encoding
