"""The chunk ids a metadata filter allows on a Milvus-resident knowledge base, carried as a Milvus expression, so a
filtered search is answered inside Milvus before the top-k cut.

A dict filter becomes one expression by `ctxrag.stores.filters.milvus_expression` (the filter language and its
translation live there, beside the in-memory matcher). A predicate, or a value no expression can state (None, a
dict), cannot be pushed down: the chunk lookup then evaluates it over every chunk's metadata and sends the ids.

`FilteredIds` is what the chunk lookup's ``allowed_chunk_ids`` returns: a set of chunk ids that also carries its
expression; the Milvus indexes search with the expression and never list the ids, any other reader gets a real set
(listed by one Milvus query on first use).

Example::

    from ctxrag.stores.milvus_resident.expressions import FilteredIds, allowed_expression
    allowed = FilteredIds('source == "a.md"', list_ids=store.chunk_ids)
    allowed_expression(allowed)      # 'source == "a.md"' (the ids are listed only when iterated)
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Set
from typing import Any

from ctxrag.stores.filters import NOTHING, ids_expression


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
