"""How a user names a stored document: its id, its exact source, or a whole trailing part of its source path (a
file name, ``dir/name.md``), case-sensitive. One rule for every store (SQLite and Milvus), so ``ctxrag doc show``,
``doc delete`` and the router resolve a name the same way wherever the knowledge base lives.

``name.md`` matches ``/data/name.md`` but not ``/data/my-name.md`` (a trailing part starts after a ``/``); several
matches are `AmbiguousDocument` listing them, never a guess; an empty key matches nothing.

Example::

    from ctxrag.stores.documents.document_keys import pick_by_source
    rows = [("d1", "/kb/a/notes.md"), ("d2", "/kb/b/notes.md")]
    pick_by_source("a/notes.md", rows, source=lambda r: r[1], doc_id=lambda r: r[0])   # ("d1", "/kb/a/notes.md")
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from ctxrag.errors import AmbiguousDocument, DocumentNotFound

Row = TypeVar("Row")
Found = TypeVar("Found", covariant=True)


def is_blank(key: str) -> bool:
    """An empty or all-space key names no document."""
    return not key or not key.strip()


def source_tail(key: str) -> str:
    """The suffix a source must end with to match `key` as a trailing part of its path."""
    return key if key.startswith("/") else "/" + key


def pick_by_source(key: str, rows: Iterable[Row], *, source: Callable[[Row], str],
                   doc_id: Callable[[Row], str]) -> Row | None:
    """The one row whose source is `key`, else the one whose source ends with the path part `key`; None when none
    does; `AmbiguousDocument` naming up to ten of them when several do. (Lookup by id comes first, in the store.)"""
    if is_blank(key):
        return None
    rows, tail = list(rows), source_tail(key)
    found = [r for r in rows if source(r) == key] or [r for r in rows if source(r).endswith(tail)]
    if len(found) > 1:
        listed = ", ".join(f"{source(r)} ({doc_id(r)})" for r in found[:10])
        raise AmbiguousDocument(f"{key!r} matches {len(found)} documents: {listed}; give the whole path or the id")
    return found[0] if found else None


class FindsDocuments(Protocol[Found]):
    def find_document(self, key: str) -> Found | None: ...


def require_document(store: FindsDocuments[Found], key: str, kb_name: str) -> Found:
    """`store.find_document(key)`, or `DocumentNotFound` naming the key, the knowledge base and how to list them."""
    doc = store.find_document(key)
    if doc is None:
        raise DocumentNotFound(f"no document {key!r} in knowledge base {kb_name!r} (see `ctxrag doc list --kb {kb_name}`)")
    return doc
