"""The one rule for naming a stored document (`ctxrag.stores.documents.document_keys`), on plain rows."""
from __future__ import annotations

import pytest

from ctxrag.errors import AmbiguousDocument, DocumentNotFound
from ctxrag.stores.documents.document_keys import pick_by_source, require_document

ROWS = [("d1", "/kb/a/notes.md"), ("d2", "/kb/b/notes.md"), ("d3", "/kb/my-notes.md"), ("d4", "/kb/Notes.md")]


def _pick(key: str, rows: list[tuple[str, str]] = ROWS) -> tuple[str, str] | None:
    return pick_by_source(key, rows, source=lambda r: r[1], doc_id=lambda r: r[0])


def test_a_whole_trailing_part_of_the_path_matches_and_any_other_suffix_does_not() -> None:
    assert _pick("a/notes.md") == ROWS[0]
    assert _pick("my-notes.md") == ROWS[2]
    assert _pick("-notes.md") is None and _pick("otes.md") is None
    assert _pick("Notes.md") == ROWS[3]  # case-sensitive: notes.md of a/ and b/ do not match
    assert _pick("/kb/b/notes.md") == ROWS[1]


def test_an_exact_source_wins_over_a_longer_path_ending_with_it() -> None:
    rows = [("x", "notes.md"), ("y", "/kb/notes.md")]
    assert _pick("notes.md", rows) == rows[0]


def test_several_matches_are_named_never_guessed() -> None:
    with pytest.raises(AmbiguousDocument, match=r"'notes.md' matches 2 documents: /kb/a/notes.md \(d1\), /kb/b/notes.md \(d2\)"):
        _pick("notes.md")


def test_an_empty_key_names_nothing() -> None:
    assert _pick("") is None and _pick("   ") is None and _pick("", [("d", "")]) is None


def test_require_document_names_the_key_and_the_knowledge_base() -> None:
    class Store:
        def find_document(self, key: str) -> str | None:
            return {"a.md": "A"}.get(key)

    assert require_document(Store(), "a.md", "demo") == "A"
    with pytest.raises(DocumentNotFound, match=r"no document 'b.md' in knowledge base 'demo' .*ctxrag doc list --kb demo"):
        require_document(Store(), "b.md", "demo")
