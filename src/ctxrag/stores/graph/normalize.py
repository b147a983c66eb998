"""Entity-name normalisation, so one real-world entity is one graph node.

"leonhard Euler", "Leonhard  Euler" and "Leonhard Euler." all become the key ``"leonhard euler"``; Chinese names lose
the spaces and middle dots that writers put between their parts ("莱昂哈德·欧拉" and "莱昂哈德 欧拉" are one key).

Example::

    from ctxrag.stores.graph.normalize import entity_key, clean_text
    entity_key("  Leonhard   EULER. ")   # 'leonhard euler'
    entity_key("U.S.") == entity_key("US")  # True
    entity_key("Euler's")                    # 'euler'
    clean_text(" Daniel\\n Bernoulli ")   # 'Daniel Bernoulli'
"""
from __future__ import annotations

import re
import unicodedata

_SPACE = re.compile(r"\s+")
# punctuation dropped without a trace: dots inside abbreviations and apostrophes ("U.S." == "US", "don't" == "dont")
_DROP = {".", "'", "\u2019", "\u2018", "`", "\u00b4"}
# English possessive: "Euler's teacher" mentions "Euler"
_POSSESSIVE = re.compile(r"(\w)['\u2019]s\b")
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_GAP = re.compile(rf"(?<=[{_CJK}]) (?=[{_CJK}])")


def clean_text(text: str) -> str:
    """Unicode NFKC, whitespace collapsed to single spaces, trimmed: the surface form we display and embed."""
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__}: {text!r}")
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def entity_key(name: str) -> str:
    """The normalised key of an entity name: case-folded, punctuation removed or turned into spaces, spaces collapsed.

    Returns '' for a name that is only punctuation or whitespace (callers skip those).
    """
    text = _POSSESSIVE.sub(r"\1", clean_text(name).casefold())
    out: list[str] = []
    for ch in text:
        if ch in _DROP:
            continue
        cat = unicodedata.category(ch)
        # P* punctuation and S* symbols (·, ・, ~, |) separate words; keep letters, digits, marks
        out.append(" " if cat[0] in "PS" else ch)
    key = _SPACE.sub(" ", "".join(out)).strip()
    return _CJK_GAP.sub("", key)


def relation_key(subject: str, predicate: str, obj: str) -> str:
    """Key of a subject-predicate-object triplet: duplicates within or across passages become one relation."""
    return "\x1f".join((entity_key(subject), entity_key(predicate), entity_key(obj)))


def relation_text(subject: str, predicate: str, obj: str) -> str:
    """The triplet as a sentence, the form we embed and show an LLM: ``"Leonhard Euler student of Johann Bernoulli"``."""
    return " ".join(p for p in (clean_text(subject), clean_text(predicate), clean_text(obj)) if p)
