"""Stage 1 of BM25: text -> tokens, for English prose, source code, Chinese, and text mixing them.

Every tokenizer is a plain ``Callable[[str], list[str]]`` that also knows its own ``config()``, so an index can save
which tokenizer built it and rebuild the same one on load. Any other callable (``jieba.lcut``, ``str.split``) is
accepted too; it cannot be saved, so loading such an index asks for it again.

>>> EnglishTokenizer()("getUserName returns the HTTPServer's user_name")
['getusername', 'get', 'user', 'name', 'returns', 'httpserver', 'http', 'server', 'user_name', 'user', 'name']
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from importlib import resources
from typing import Any

from ctxrag.errors import ConfigError
from ctxrag.stores.bm25.jieba_dictionary import segmenter_for
from ctxrag.text import to_simplified

Tokenizer = Callable[[str], list[str]]

_WORD = re.compile(r"\w+")
# ASCII identifier pieces: "HTTPServer2x" -> HTTP, Server, 2, x
_CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]+")


@lru_cache(maxsize=None)
def load_stopwords(language: str) -> frozenset[str]:
    """The stopword list shipped with ctxrag for ``"en"`` or ``"zh"`` (``src/ctxrag/resources/stopwords``)."""
    if language not in ("en", "zh"):
        raise ConfigError(f"no stopword list for language {language!r}; expected 'en' or 'zh'")
    text = resources.files("ctxrag").joinpath(f"resources/stopwords/{language}.txt").read_text(encoding="utf-8")
    return frozenset(w.strip() for w in text.splitlines() if w.strip() and not w.startswith("#"))


def _resolve_stopwords(stopwords: bool | Iterable[str], languages: tuple[str, ...]) -> frozenset[str]:
    if stopwords is True:
        return frozenset().union(*(load_stopwords(lang) for lang in languages))
    if stopwords is False or stopwords is None:
        return frozenset()
    if isinstance(stopwords, str):
        raise ConfigError(f"stopwords must be True, False or a collection of words, not the string {stopwords!r}")
    return frozenset(stopwords)


class EnglishTokenizer:
    """Lowercased word tokens for English and source code.

    Splits on non-word characters and inside identifiers (``camelCase``, ``snake_case``); with
    ``keep_identifiers`` the whole identifier is kept too, so an exact identifier query still matches exactly.

    >>> EnglishTokenizer(stem=True)("Indexing the databases")
    ['index', 'databas']
    """

    name = "english"

    def __init__(
        self,
        *,
        lowercase: bool = True,
        split_identifiers: bool = True,
        keep_identifiers: bool = True,
        stem: bool = False,
        stopwords: bool | Iterable[str] = True,
    ) -> None:
        self.lowercase = lowercase
        self.split_identifiers = split_identifiers
        self.keep_identifiers = keep_identifiers
        self.stem = stem
        self.stopwords = _resolve_stopwords(stopwords, ("en",))
        self._custom_stopwords = None if isinstance(stopwords, bool) else sorted(self.stopwords)
        self._stem_words = _english_stemmer() if stem else None

    def __call__(self, text: str) -> list[str]:
        tokens: list[str] = []
        for word in _WORD.findall(text):
            tokens.extend(self._pieces(word))
        if self.lowercase:
            tokens = [t.lower() for t in tokens]
        if self.stopwords:
            tokens = [t for t in tokens if t not in self.stopwords]
        if self._stem_words is not None:
            tokens = self._stem_words(tokens)
        return tokens

    def _pieces(self, word: str) -> list[str]:
        if not self.split_identifiers or (word.isalnum() and (word.islower() or word.isupper()) and word.isascii()):
            return [word]
        parts: list[str] = []
        for piece in word.split("_"):
            if not piece:
                continue
            # only ASCII identifiers have a camelCase convention; "Straße" stays one word
            parts.extend(_CAMEL_PART.findall(piece) if piece.isascii() else [piece])
        if len(parts) <= 1:
            return parts or [word]
        return [word, *parts] if self.keep_identifiers else parts

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "lowercase": self.lowercase,
            "split_identifiers": self.split_identifiers,
            "keep_identifiers": self.keep_identifiers,
            "stem": self.stem,
            "stopwords": self._custom_stopwords if self._custom_stopwords is not None else bool(self.stopwords),
        }


class ChineseTokenizer:
    """jieba word segmentation; ``search_mode`` also emits the short words inside long ones (``lcut_for_search``).

    Punctuation and whitespace tokens are dropped, Latin words are lowercased. With ``script="simplified"`` (the
    default) Traditional characters are converted to Simplified before segmentation, so zh-Hant and zh-Hans text
    (documents and queries alike) give the same tokens and jieba's Simplified dictionary segments both well.

    >>> ChineseTokenizer(search_mode=True)("中华人民共和国成立了")
    ['中华', '华人', '人民', '共和', '共和国', '中华人民共和国', '成立']
    >>> ChineseTokenizer()("臺灣的首都是哪裡？") == ChineseTokenizer()("台湾的首都是哪里？")
    True
    """

    name = "chinese"

    def __init__(
        self, *, search_mode: bool = False, stopwords: bool | Iterable[str] = True, script: str = "simplified"
    ) -> None:
        self.search_mode = search_mode
        self.script = _check_script(script)
        self.stopwords = _resolve_stopwords(stopwords, ("zh", "en"))
        self._custom_stopwords = None if isinstance(stopwords, bool) else sorted(self.stopwords)
        self._convert = to_simplified if self.script == "simplified" else None

    def __call__(self, text: str) -> list[str]:
        if self._convert is not None:
            text = self._convert(text)
        segmenter = segmenter_for(text)  # jieba with the dictionary entries this text needs (`jieba_dictionary`)
        cut = segmenter.lcut_for_search if self.search_mode else segmenter.lcut
        out = []
        for token in cut(text):
            token = token.strip().lower()
            if token and _WORD.search(token) and token not in self.stopwords:
                out.append(token)
        return out

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "search_mode": self.search_mode,
            "stopwords": self._custom_stopwords if self._custom_stopwords is not None else bool(self.stopwords),
            "script": self.script,
        }


class MixedTokenizer:
    """Text mixing Chinese and English/code: CJK runs go to jieba, everything else to the English tokenizer.

    >>> MixedTokenizer()("用 BM25Index 检索中文和English文本")
    ['用', 'bm25index', 'bm', '25', 'index', '检索', '中文', 'english', '文本']
    """

    name = "mixed"

    def __init__(
        self,
        *,
        search_mode: bool = False,
        split_identifiers: bool = True,
        keep_identifiers: bool = True,
        stem: bool = False,
        stopwords: bool | Iterable[str] = True,
        script: str = "simplified",
    ) -> None:
        words = _resolve_stopwords(stopwords, ("en", "zh"))
        self.english = EnglishTokenizer(
            split_identifiers=split_identifiers, keep_identifiers=keep_identifiers, stem=stem, stopwords=words
        )
        self.chinese = ChineseTokenizer(search_mode=search_mode, stopwords=words, script=script)
        self._custom_stopwords = None if isinstance(stopwords, bool) else sorted(words)
        self._has_stopwords = bool(words)

    def __call__(self, text: str) -> list[str]:
        tokens: list[str] = []
        pos = 0
        for run in _CJK_RUN.finditer(text):
            if run.start() > pos:
                tokens.extend(self.english(text[pos : run.start()]))
            tokens.extend(self.chinese(run.group()))
            pos = run.end()
        if pos < len(text):
            tokens.extend(self.english(text[pos:]))
        return tokens

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "search_mode": self.chinese.search_mode,
            "split_identifiers": self.english.split_identifiers,
            "keep_identifiers": self.english.keep_identifiers,
            "stem": self.english.stem,
            "stopwords": self._custom_stopwords if self._custom_stopwords is not None else self._has_stopwords,
            "script": self.chinese.script,
        }


_NAMES: dict[str, type] = {
    "english": EnglishTokenizer,
    "code": EnglishTokenizer,
    "chinese": ChineseTokenizer,
    "jieba": ChineseTokenizer,
    "mixed": MixedTokenizer,
}
CALLABLE_TOKENIZER = "callable"
_SCRIPT_AWARE = ("chinese", "jieba", "mixed")
SCRIPTS = ("simplified", "keep")


def _check_script(script: str) -> str:
    if script not in SCRIPTS:
        raise ConfigError(f"unknown Chinese script option {script!r}; expected one of {SCRIPTS}")
    return script


def make_tokenizer(spec: str | dict[str, Any] | Tokenizer = "mixed", **options: Any) -> Tokenizer:
    """A tokenizer from a name (``"english"``/``"code"``, ``"chinese"``/``"jieba"``, ``"mixed"``), a saved
    ``config()`` dict, or any callable (returned as is).

    >>> make_tokenizer("code")("snake_case")
    ['snake_case', 'snake', 'case']
    """
    if callable(spec):
        if options:
            raise ConfigError(f"tokenizer options {sorted(options)} only apply to named tokenizers, not {spec!r}")
        return spec
    if isinstance(spec, dict):
        saved = {k: v for k, v in spec.items() if k != "name"}
        if spec.get("name") in _SCRIPT_AWARE and "script" not in saved:
            saved["script"] = "keep"  # saved before Traditional->Simplified conversion existed: tokenize as it was built
        options = {**saved, **options}
        spec = spec.get("name", "")
    if not isinstance(spec, str) or spec.lower() not in _NAMES:
        raise ConfigError(f"unknown tokenizer {spec!r}; expected one of {sorted(_NAMES)} or a callable")
    try:
        return _NAMES[spec.lower()](**options)
    except TypeError as exc:
        raise ConfigError(f"bad options {options} for tokenizer {spec!r}: {exc}") from None


def tokenizer_config(tokenizer: Tokenizer) -> dict[str, Any]:
    """What to save about a tokenizer: its config, or ``{"name": "callable"}`` for a callable we cannot rebuild."""
    config = getattr(tokenizer, "config", None)
    if callable(config) and getattr(tokenizer, "name", None) in _NAMES:
        return config()
    return {"name": CALLABLE_TOKENIZER, "repr": repr(tokenizer)[:200]}


@lru_cache(maxsize=1)
def _english_stemmer() -> Callable[[list[str]], list[str]]:
    try:
        import snowballstemmer
    except ImportError:  # pragma: no cover - snowballstemmer is a dependency
        raise ConfigError("stem=True needs the snowballstemmer package: pip install snowballstemmer") from None
    stemmer = snowballstemmer.stemmer("english")
    cache: dict[str, str] = {}

    def stem_words(tokens: list[str]) -> list[str]:
        # stemming is the slow part of tokenizing; vocabularies are small, so memoise per word
        out = []
        for token in tokens:
            stem = cache.get(token)
            if stem is None:
                stem = cache[token] = stemmer.stemWord(token)
            out.append(stem)
        return out

    return stem_words
