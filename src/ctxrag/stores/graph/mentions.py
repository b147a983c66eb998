"""Entity mentions in a question without an LLM, matched against a graph's entity vocabulary (`GraphIndex`).

Word n-grams (and, for Chinese, substrings) that are entity names, longest first and not inside a longer match, plus
capitalised phrases (likely English names the graph may spell differently, e.g. "Euler" for "Leonhard Euler").

Example::

    from ctxrag.stores.graph.mentions import find_entity_mentions
    find_entity_mentions("Who taught Euler?", {"leonhard euler": 0}, ["Leonhard Euler"], lambda: [])   # ['Euler']
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from ctxrag.stores.graph.normalize import entity_key

_MAX_NGRAM = 8
_STOP = frozenset(
    "a an the of in on at to for by with from and or is was are were be been what who whom whose which when where why "
    "how did does do that this these those it its he she his her they their there as than then also".split()
)
_CAPITALISED = re.compile(r"[A-Z0-9][\w\-'’.&]*(?:\s+(?:of|the|de|la|von|van|and|&|[A-Z0-9][\w\-'’.&]*))*")
_HAS_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


def cjk_entity_keys(entity_ids: Mapping[str, int]) -> list[tuple[str, int]]:
    """Chinese entity keys of two or more characters with their ids, longest first (substring matching order)."""
    return sorted(((k, i) for k, i in entity_ids.items() if _HAS_CJK.search(k) and len(k) >= 2),
                  key=lambda x: -len(x[0]))


def find_entity_mentions(
    text: str, entity_ids: Mapping[str, int], entity_names: Sequence[str],
    cjk_keys: Callable[[], list[tuple[str, int]]],
) -> list[str]:
    """Mentions in `text` (see the module docstring): graph names as the graph spells them, then capitalised phrases.

    `entity_ids` maps normalised names (`entity_key`) to ids, `entity_names` ids to display names; `cjk_keys` gives
    `cjk_entity_keys` (called only for a Chinese question, so the caller can cache it)."""
    found: list[str] = []
    key = entity_key(text)
    words = key.split()
    taken = [False] * len(words)
    for n in range(min(_MAX_NGRAM, len(words)), 0, -1):
        for i in range(len(words) - n + 1):
            if any(taken[i : i + n]):
                continue
            gram = " ".join(words[i : i + n])
            if gram in entity_ids and not (n == 1 and not _named_word(gram, text)):
                found.append(entity_names[entity_ids[gram]])
                taken[i : i + n] = [True] * n
    if _HAS_CJK.search(key):
        compact = key.replace(" ", "")
        for k, i in cjk_keys():
            if k in compact and not any(k in entity_key(f) for f in found):
                found.append(entity_names[i])
    for match in _CAPITALISED.finditer(text):
        words = match.group(0).split()
        while words and entity_key(words[0]) in _STOP:
            words.pop(0)
        while words and entity_key(words[-1]) in _STOP:
            words.pop()
        found.append(re.sub(r"['’]s$", "", " ".join(words)).strip(" -'’."))
    out: list[str] = []
    seen: set[str] = set()
    for mention in found:
        k = entity_key(mention)
        if k and k not in seen:
            seen.add(k)
            out.append(mention)
    return out


def _named_word(word: str, text: str) -> bool:
    """A one-word match counts when it looks like a name: capitalised or a number in the text ("Basel", "1963"),
    or Chinese; a lowercase common word ("state", "river") is too weak a seed in a large graph."""
    if word in _STOP or len(word) < 2:
        return False
    if _HAS_CJK.search(word):
        return True
    for m in re.finditer(rf"(?<!\w){re.escape(word)}", text, flags=re.IGNORECASE):
        if m.group(0)[0].isupper() or m.group(0)[0].isdigit():
            return True
    return False
