"""Metadata filters as Milvus boolean expressions, so a filtered search is answered inside Milvus before the top-k cut.

A dict filter ``{key: value}`` / ``{key: [values]}`` (every key must match, as for the local store) becomes one
expression: keys that are scalar fields of the chunks collection (`SCALAR_FIELDS`) compare that field, any other key
compares ``metadata["key"]`` in the JSON field. A predicate, or a value no expression can state (None, a dict),
cannot be pushed down: `FilteredIds` then evaluates it over every chunk's metadata and sends the matching ids.

`FilteredIds` is what the chunk lookup's ``allowed_chunk_ids`` returns: a set of chunk ids that also carries its
expression; the Milvus indexes search with the expression and never list the ids, any other reader gets a real set
(listed by one Milvus query on first use).

Example::

    from ctxrag.stores.milvus_resident.expressions import filter_expression
    filter_expression({"file_type": ["markdown", "text"], "source": "a.md"})
    # '(metadata["file_type"] == "markdown" or metadata["file_type"] == "text") and source == "a.md"'
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Set
from typing import Any

from ctxrag.errors import ConfigError

SCALAR_FIELDS = frozenset({"chunk_id", "doc_id", "kb", "source", "title", "heading_path", "language", "chunk_index"})
"""Chunk fields a filter compares directly (indexed scalars); every other key is looked up in the JSON metadata."""
_SIMPLE = (str, int, float, bool)
NOTHING = "false"
"""The expression of a filter no chunk can pass (an empty list of values); searches return nothing without asking."""


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False)


def _term(key: str, value: Any) -> str | None:
    if not isinstance(key, str) or not key:
        raise ConfigError(f"filter keys must be non-empty strings, got {key!r}")
    target = key if key in SCALAR_FIELDS else f"metadata[{json.dumps(key, ensure_ascii=False)}]"
    if isinstance(value, (list, tuple, set, frozenset)):
        values = list(value)
        if not all(isinstance(v, _SIMPLE) for v in values):
            return None
        if not values:
            return NOTHING
        if key not in SCALAR_FIELDS:  # milvus-lite takes `in` on fields only: a JSON key compares each value
            return "(" + " or ".join(f"{target} == {_literal(v)}" for v in values) + ")"
        return f"{target} in [{', '.join(_literal(v) for v in values)}]"
    if not isinstance(value, _SIMPLE):
        return None
    return f"{target} == {_literal(value)}"


def filter_expression(filter: dict[str, Any]) -> str | None:
    """The Milvus expression of a dict filter; None when some value cannot be stated as one (see module docstring)."""
    terms = []
    for key, value in sorted(filter.items()):
        term = _term(key, value)
        if term is None:
            return None
        if term == NOTHING:
            return NOTHING
        terms.append(term)
    return " and ".join(terms) if terms else ""


def ids_expression(chunk_ids: Set[str] | list[str]) -> str:
    """``chunk_id in [...]`` (Milvus Lite takes no filter templates: each id is a JSON-quoted literal)."""
    return f"chunk_id in {json.dumps(sorted(chunk_ids), ensure_ascii=False)}"


class FilteredIds(Set[str]):
    """The chunk ids a filter allows, with the Milvus `expression` that selects them; ids listed on first use."""

    def __init__(self, expression: str, list_ids: Callable[[str], set[str]]) -> None:
        self.expression = expression
        self._list_ids = list_ids
        self._ids: set[str] | None = None

    @property
    def ids(self) -> set[str]:
        if self._ids is None:
            self._ids = self._list_ids(self.expression)
        return self._ids

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self.ids

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __bool__(self) -> bool:  # "can anything match?" without listing: let the search answer
        return self.expression != NOTHING if self._ids is None else bool(self._ids)

    @classmethod
    def _from_iterable(cls, it: Any) -> set[str]:  # set algebra (`a & b`) gives a plain set
        return set(it)

    def __repr__(self) -> str:
        return f"FilteredIds({self.expression!r})"


def allowed_expression(allowed: Set[str] | None) -> str:
    """The expression restricting a search to `allowed` ('' = everything): a `FilteredIds`'s own, else the ids."""
    if allowed is None:
        return ""
    if isinstance(allowed, FilteredIds):
        return allowed.expression
    return ids_expression(allowed) if allowed else NOTHING
