"""`Triplet`: one subject-predicate-object fact as the graph index stores it, and `coerce_triplets`, which turns the
shapes triplets arrive in (3-item lists, subject/predicate/object-like dicts, in English or Chinese) into them.

Example::

    from ctxrag.stores.graph.triplet import coerce_triplets
    coerce_triplets([["Euler", "student of", "Johann Bernoulli"], {"head": "a", "relation": "b", "tail": "c"}])
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ctxrag.stores.graph.normalize import clean_text, entity_key

log = logging.getLogger(__name__)


class Triplet(NamedTuple):
    """One fact: ``subject predicate object``."""

    subject: str
    predicate: str
    object: str


_DICT_KEYS = (
    ("subject", "predicate", "object"),
    ("subject", "relation", "object"),
    ("head", "relation", "tail"),
    ("s", "p", "o"),
    ("主语", "谓语", "宾语"),
)


def coerce_triplet(item: Any) -> Triplet | None:
    """A `Triplet` from a 3-item list/tuple or a dict with subject/predicate/object-like keys; None when unusable.

    Items are cleaned (whitespace, NFKC); a triplet whose subject or object has no letters or digits is dropped.
    """
    parts: Sequence[Any] | None = None
    if isinstance(item, (list, tuple)) and len(item) == 3:
        parts = item
    elif isinstance(item, dict):
        lowered = {str(k).strip().lower(): v for k, v in item.items()}
        for keys in _DICT_KEYS:
            if all(k in lowered for k in keys):
                parts = [lowered[k] for k in keys]
                break
    if parts is None:
        return None
    if not all(isinstance(p, (str, int, float)) and not isinstance(p, bool) for p in parts):
        return None
    s, p, o = (clean_text(str(x)) for x in parts)
    if not entity_key(s) or not entity_key(o) or not p:
        return None
    return Triplet(s, p, o)


def coerce_triplets(items: Iterable[Any], *, where: str = "") -> list[Triplet]:
    """Every usable triplet of `items`, order kept, duplicates removed; logs how many were skipped."""
    out: list[Triplet] = []
    seen: set[Triplet] = set()
    skipped = 0
    for item in items:
        triplet = coerce_triplet(item)
        if triplet is None:
            skipped += 1
        elif triplet not in seen:
            seen.add(triplet)
            out.append(triplet)
    if skipped:
        log.warning("skipped %d malformed triplet(s)%s", skipped, f" in {where}" if where else "")
    return out
