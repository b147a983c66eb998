"""jieba's default dictionary, loaded only as far as the text being segmented needs it.

jieba keeps its whole dictionary as one dict of words and word prefixes; loading it, even from jieba's own marshal
cache, costs more than everything else a one-query ``ctxrag search`` does. Every lookup jieba makes while
segmenting a text (the prefix DAG, the route scores, the search-mode n-grams, the check before its HMM fallback) is a
substring of that text, so only the entries starting with one of the text's characters can matter.
`ShardedDictionary` keeps the dictionary split by first character in one cache file under the models cache
(``$CTXRAG_MODELS_CACHE/jieba/dict-shards.marshal``, written by the first process that needs it, read by every later
one), and gives a private `jieba.Tokenizer` the shards for a text's characters before it segments that text: the same
tokens as the fully loaded dictionary. A long text (an ingest) loads about the whole dictionary, once per process.

jieba's global tokenizer (``jieba.dt``) is used instead as soon as something has touched it (``jieba.add_word``,
``jieba.load_userdict``, ``jieba.set_dictionary``, ``jieba.initialize``), so custom words apply exactly as before.

Example::

    from ctxrag.stores.bm25.jieba_dictionary import segmenter_for
    text = "星河知识库的默认端口"
    segmenter_for(text).lcut(text)          # ['星河', '知识库', '的', '默认', '端口']
"""
from __future__ import annotations

import logging
import marshal
import os
import sys
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CACHE_FILE = Path("jieba") / "dict-shards.marshal"
"""The shard cache's path under the models cache."""
_FORMAT = 1


@lru_cache(maxsize=1)
def jieba_module() -> Any:
    """jieba, imported on the first Chinese text (English-only queries and documents never load it).

    jieba 0.42 imports setuptools' deprecated ``pkg_resources`` only to open its own dictionary files, which costs
    more than the rest of jieba's import; with that import refused it opens the same files by path."""
    blocked = "pkg_resources" not in sys.modules
    if blocked:
        sys.modules["pkg_resources"] = None  # type: ignore[assignment] - `import pkg_resources` raises ImportError
    try:
        import jieba
    finally:
        if blocked:
            del sys.modules["pkg_resources"]
    jieba.setLogLevel(logging.WARNING)  # jieba prints its dictionary loading otherwise
    return jieba


def segmenter_for(text: str) -> Any:
    """A `jieba.Tokenizer` ready to segment `text` (its ``lcut`` / ``lcut_for_search``): jieba's global one when the
    application has touched it, else the shared `ShardedDictionary`'s with the shards `text` needs loaded."""
    jieba = jieba_module()
    if jieba.dt.initialized or jieba.dt.dictionary != jieba.DEFAULT_DICT:
        return jieba.dt
    return _shared().segmenter(text)


@lru_cache(maxsize=1)
def _shared() -> ShardedDictionary:
    return ShardedDictionary(_cache_path())


def _cache_path() -> Path | None:
    from ctxrag.settings import get_settings

    try:
        return get_settings().models_dir / CACHE_FILE
    except Exception as exc:  # noqa: BLE001 - the cache only saves time: without a folder the shards stay in memory
        log.debug("no models cache for jieba's dictionary shards: %s", exc)
        return None


class ShardedDictionary:
    """jieba's default dictionary split by first character; `segmenter` loads the shards a text needs.

    Example::

        shards = ShardedDictionary(Path("/tmp/dict-shards.marshal"))
        shards.segmenter("端口号").lcut("端口号")
    """

    def __init__(self, cache_file: Path | None) -> None:
        self.cache_file = cache_file
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._shards: dict[str, bytes] = {}
        self._loaded: set[str] = set()

    def segmenter(self, text: str) -> Any:
        """The private `jieba.Tokenizer`, holding every dictionary entry that starts with a character of `text`."""
        with self._lock:
            if self._tokenizer is None:
                self._open()
            for ch in set(text).difference(self._loaded):
                blob = self._shards.get(ch)
                if blob is not None:
                    self._tokenizer.FREQ.update(marshal.loads(blob))
                self._loaded.add(ch)
            return self._tokenizer

    def _open(self) -> None:
        jieba = jieba_module()
        source = _source(jieba)
        data = self._read(source)
        if data is None:
            data = self._build(jieba, source)
        tokenizer = jieba.Tokenizer()
        tokenizer.FREQ, tokenizer.total, tokenizer.initialized = {}, data["total"], True
        self._shards, self._tokenizer = data["shards"], tokenizer

    def _read(self, source: list[Any]) -> dict[str, Any] | None:
        if self.cache_file is None or not self.cache_file.is_file():
            return None
        try:
            with open(self.cache_file, "rb") as f:
                data = marshal.load(f)
        except (OSError, EOFError, ValueError, TypeError) as exc:
            log.warning("rebuilding jieba's dictionary shards: cannot read %s (%s)", self.cache_file, exc)
            return None
        if not isinstance(data, dict) or data.get("source") != source:
            return None  # another jieba (or dictionary file) wrote it: rebuild from this one
        return data

    def _build(self, jieba: Any, source: list[Any]) -> dict[str, Any]:
        """Shards from jieba's own dictionary file (what ``jieba.initialize`` reads), saved for later processes."""
        freq, total = jieba.Tokenizer.gen_pfdict(jieba.Tokenizer().get_dict_file())
        groups: dict[str, dict[str, int]] = {}
        for word, count in freq.items():
            groups.setdefault(word[0], {})[word] = count
        data = {"source": source, "total": total, "shards": {ch: marshal.dumps(g) for ch, g in groups.items()}}
        if self.cache_file is not None:
            tmp = None
            try:
                self.cache_file.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self.cache_file.parent, prefix=".dict-shards-")
                with os.fdopen(fd, "wb") as f:
                    marshal.dump(data, f)
                os.replace(tmp, self.cache_file)  # atomic: a process reading it sees the old file or the whole new one
            except OSError as exc:
                log.warning("cannot save jieba's dictionary shards to %s (%s): kept in memory", self.cache_file, exc)
                if tmp is not None:
                    Path(tmp).unlink(missing_ok=True)
        return data


def _source(jieba: Any) -> list[Any]:
    """What the shards were built from: this format, jieba's version, and its dictionary file's path, size, mtime."""
    path = Path(jieba.__file__).parent / jieba.DEFAULT_DICT_NAME
    stat = path.stat()
    return [_FORMAT, jieba.__version__, str(path), stat.st_size, stat.st_mtime_ns]
