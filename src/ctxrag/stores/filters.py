"""Metadata filters, the one filter language of ctxrag: the `MetadataFilter` type, its check, the in-memory matcher
every local reader uses, and its translation into a Milvus boolean expression.

A filter is a dict ``{key: value}`` / ``{key: [values]}`` (every key must match; a list, tuple, set or frozenset
allows any of its values; a key the metadata lacks reads as None) or a predicate over the metadata dict. A dict filter
is checked before it is used: a key that is not a non-empty string, or a value that is neither a value nor a
collection of values (a generator, a range, an array), raises `ConfigError` naming that key and value.

- `metadata_matches` / `matcher`: in memory (the local chunk lookup, the BM25 and graph retrievers, the
  `VectorStore` face).
- `milvus_expression`: the same filter as a Milvus expression, answered inside Milvus before the top-k cut; keys that
  are scalar fields of a Milvus-resident chunks collection (`SCALAR_FIELDS`) compare that field, any other key
  compares ``metadata["key"]`` in its JSON field. A filter with a value no expression can state (None, a nested dict)
  gives None: the caller then evaluates it with `matcher` and sends the matching ids (`ids_expression`, also what a
  local knowledge base with its vectors in Milvus sends).

Example::

    from ctxrag.stores.filters import metadata_matches, milvus_expression
    metadata_matches({"file_type": "markdown", "lang": "en"}, {"file_type": ["markdown", "text"]})   # True
    milvus_expression({"file_type": ["markdown", "text"], "source": "a.md"})
    # '(metadata["file_type"] == "markdown" or metadata["file_type"] == "text") and source == "a.md"'
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Union

from ctxrag.errors import ConfigError

MetadataFilter = Union[dict[str, Any], Callable[[dict[str, Any]], bool]]
"""A metadata filter: ``{key: value}`` / ``{key: [values]}`` (every key must match) or a predicate."""

_ANY_OF = (list, tuple, set, frozenset)
"""Value kinds that allow any of their values."""


def check_filter(filter: Any, where: str = "filter") -> MetadataFilter | None:
    """`filter` if it is None, a predicate or a valid dict filter, else `ConfigError` (a `ValueError`) naming the
    offending filter, key or value."""
    if filter is None or callable(filter):
        return filter
    if not isinstance(filter, Mapping):
        raise ConfigError(
            f"{where} must be a dict of metadata values or a predicate, got {type(filter).__name__}: {filter!r:.100}"
        )
    for key, value in filter.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where}: keys must be non-empty strings, got {key!r}")
        if isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping, *_ANY_OF)):
            raise ConfigError(f"{where}: the value of {key!r} must be a value or a list/tuple/set of values, "
                              f"got {type(value).__name__}: {value!r:.100}")
    return filter  # type: ignore[return-value]


def matcher(filter: MetadataFilter | None) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over a metadata dict for `filter` (checked once, here): for filtering many records."""
    check_filter(filter)
    if filter is None:
        return lambda metadata: True
    if callable(filter):
        predicate = filter
        return lambda metadata: bool(predicate(dict(metadata)))
    terms = [(key, want, isinstance(want, _ANY_OF)) for key, want in filter.items()]

    def matches(metadata: Mapping[str, Any]) -> bool:  # a plain loop: it runs once per chunk of a knowledge base
        for key, want, any_of in terms:
            have = metadata.get(key)
            if any_of:
                try:
                    if have not in want:
                        return False
                except TypeError:  # an unhashable metadata value (a list) looked up in a set: equal to no member
                    return False
            elif have != want:
                return False
        return True

    return matches


def metadata_matches(metadata: Mapping[str, Any], filter: MetadataFilter | None) -> bool:
    """Whether `metadata` passes `filter` (see the module docstring)."""
    return matcher(filter)(metadata)


def combine_filters(first: MetadataFilter | None, second: MetadataFilter | None) -> MetadataFilter | None:
    """Both filters must match. A per-call filter narrows the constructor's, never widens it: a retriever built for
    one project's documents stays restricted to them."""
    if first is None or second is None or first is second:
        return second if first is None else first
    if isinstance(first, Mapping) and isinstance(second, Mapping) and not set(first) & set(second):
        return {**first, **second}
    return lambda metadata: metadata_matches(metadata, first) and metadata_matches(metadata, second)


def filter_key(filter: Mapping[str, Any]) -> str:
    """A string naming a dict filter's meaning, for caches: equal for equal filters (a list, tuple or set of the same
    values is the same filter; key order does not matter), different for different ones."""
    def canonical(value: Any) -> Any:
        if isinstance(value, _ANY_OF):
            return {"any of": sorted((canonical(v) for v in value), key=repr)}
        if isinstance(value, Mapping):
            return {"dict": {str(k): canonical(v) for k, v in value.items()}}
        if value is None or isinstance(value, (str, int, float)):
            return value
        return {type(value).__name__: repr(value)}

    return json.dumps({key: canonical(value) for key, value in filter.items()}, sort_keys=True, ensure_ascii=False)


# -- Milvus ---------------------------------------------------------------------------------------------------------
SCALAR_FIELDS = frozenset({"chunk_id", "doc_id", "kb", "source", "title", "heading_path", "language", "chunk_index"})
"""Chunk fields a filter compares directly (indexed scalars); every other key is looked up in the JSON metadata."""
_SIMPLE = (str, int, float, bool)
NOTHING = "false"
"""The expression of a filter no chunk can pass (an empty list of values); searches return nothing without asking."""


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False)


def _fits_field(key: str, value: Any) -> Any:
    """`value` as the scalar field `key` can compare it, or `_NO_MATCH` when the field's type never equals it (Milvus
    rejects such a comparison; in memory it is simply unequal): ``chunk_index`` is an int field (``True`` is 1, as in
    Python), every other scalar field a string."""
    if key == "chunk_index":
        return int(value) if isinstance(value, bool) else value if isinstance(value, (int, float)) else _NO_MATCH
    return value if isinstance(value, str) else _NO_MATCH


_NO_MATCH = object()


def _term(key: str, value: Any) -> str | None:
    target = key if key in SCALAR_FIELDS else f"metadata[{json.dumps(key, ensure_ascii=False)}]"
    if isinstance(value, _ANY_OF):
        values = list(value)
        if not all(isinstance(v, _SIMPLE) for v in values):
            return None
        if key in SCALAR_FIELDS:
            values = [v for v in (_fits_field(key, v) for v in values) if v is not _NO_MATCH]
        if not values:
            return NOTHING
        if key not in SCALAR_FIELDS:  # milvus-lite takes `in` on fields only: a JSON key compares each value
            return "(" + " or ".join(f"{target} == {_literal(v)}" for v in values) + ")"
        return f"{target} in [{', '.join(_literal(v) for v in values)}]"
    if not isinstance(value, _SIMPLE):
        return None
    if key in SCALAR_FIELDS:
        value = _fits_field(key, value)
        if value is _NO_MATCH:
            return NOTHING
    return f"{target} == {_literal(value)}"


def ids_expression(chunk_ids: Iterable[str]) -> str:
    """``chunk_id in [...]``, the expression of an allowed-id set (Milvus Lite takes no filter templates: each id is a
    JSON-quoted literal, sorted)."""
    return f"chunk_id in {json.dumps(sorted(chunk_ids), ensure_ascii=False)}"


def milvus_expression(filter: Mapping[str, Any]) -> str | None:
    """The Milvus expression of a dict filter ('' for an empty one, `NOTHING` when no chunk can pass); None when some
    value cannot be stated as one (see the module docstring)."""
    check_filter(filter)
    terms = []
    for key, value in sorted(filter.items()):
        term = _term(key, value)
        if term is None:
            return None
        if term == NOTHING:
            return NOTHING
        terms.append(term)
    return " and ".join(terms) if terms else ""
