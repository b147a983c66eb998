"""One filter language (`ctxrag.stores.filters`), three places it is answered: the in-memory matcher, the SQLite chunk
lookup of a local knowledge base (`DocStoreChunkLookup`, cached per generation) and a real milvus-lite collection
(`MilvusChunkLookup`, the filter translated into a Milvus expression). One table of filters, the same expected chunks
from each; bad filters fail the same way everywhere, naming the key or value. (Named test_store_filters.py:
tests/compressors holds a test_filters.py, and test modules are imported by their base names.)"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxrag.errors import ConfigError
from ctxrag.stores.documents.chunk_lookup import DocStoreChunkLookup
from ctxrag.stores.documents.docstore import ChunkRecord, DocStore, DocumentRecord
from ctxrag.stores.filters import NOTHING, filter_key, ids_expression, matcher, metadata_matches, milvus_expression

EXTRA: dict[str, dict[str, Any]] = {  # chunk name -> metadata beyond what every chunk carries
    "a": {"file_type": "markdown", "lang": "en", "n": 1, "flag": True, "tags": ["x", "y"], "year": 2024},
    "b": {"file_type": "text", "lang": "zh", "n": 2, "flag": False, "year": 2023},
    "c": {"file_type": "pdf", "n": 2.5},
    "d": {"file_type": "markdown", "lang": "en", "n": 3, "nested": {"k": 1}},
    "e": {"file_type": "text", "lang": None, "n": 0},
}
LANGUAGE = {"a": "en", "b": "zh", "c": "en", "d": "en", "e": "zh"}


def _metadata(name: str) -> dict[str, Any]:
    """What a chunk of the ingest pipeline carries (the Milvus scalar fields included) plus `EXTRA`."""
    cid = f"d-{name}:0"
    return {"chunk_id": cid, "doc_id": f"d-{name}", "kb": "t", "source": f"mem://{name}.md", "title": name,
            "chunk_index": 0, "heading_path": "", "language": LANGUAGE[name], **EXTRA[name]}


def _documents() -> list[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]]:
    out = []
    for i, name in enumerate(EXTRA):
        md = _metadata(name)
        text = f"chunk {name}"
        vector = np.zeros((1, 8), dtype=np.float32)
        vector[0, i] = 1.0
        out.append((DocumentRecord(md["doc_id"], md["source"], name, f"hash-{name}", text, 1, {}),
                    [ChunkRecord(md["chunk_id"], md["doc_id"], 0, text, text, None, md)], vector))
    return out


ALL = set(EXTRA)
TABLE: list[tuple[str, Any, set[str]]] = [  # (case, filter, chunk names it allows)
    ("empty dict allows everything", {}, ALL),
    ("one value", {"file_type": "markdown"}, {"a", "d"}),
    ("list of values", {"file_type": ["markdown", "text"]}, {"a", "b", "d", "e"}),
    ("tuple of values", {"file_type": ("markdown", "pdf")}, {"a", "c", "d"}),
    ("set of values", {"file_type": {"text"}}, {"b", "e"}),
    ("frozenset of values", {"file_type": frozenset({"pdf", "text"})}, {"b", "c", "e"}),
    ("empty list allows nothing", {"file_type": []}, set()),
    ("empty frozenset allows nothing", {"file_type": frozenset()}, set()),
    ("every key must match", {"lang": "en", "file_type": "markdown"}, {"a", "d"}),
    ("None matches a missing key and a None value", {"lang": None}, {"c", "e"}),
    ("a missing key matches no value", {"no_such_key": "x"}, set()),
    ("a missing key in a list", {"no_such_key": ["x", "y"]}, set()),
    ("int", {"n": 2}, {"b"}),
    ("float", {"n": 2.5}, {"c"}),
    ("int zero", {"n": 0}, {"e"}),
    ("list of ints", {"n": [1, 3]}, {"a", "d"}),
    ("frozenset of numbers", {"n": frozenset({2, 2.5})}, {"b", "c"}),
    ("bool true", {"flag": True}, {"a"}),
    ("bool false", {"flag": False}, {"b"}),
    ("int year", {"year": 2024}, {"a"}),
    ("a string is not the number", {"year": "2024"}, set()),
    ("scalar field: source", {"source": "mem://a.md"}, {"a"}),
    ("scalar field: doc ids", {"doc_id": ["d-a", "d-c"]}, {"a", "c"}),
    ("scalar field: doc ids as a frozenset", {"doc_id": frozenset({"d-b", "d-e"})}, {"b", "e"}),
    ("scalar field: chunk index", {"chunk_index": 0}, ALL),
    ("scalar field: title among values", {"title": ("b", "zz")}, {"b"}),
    ("scalar field: language", {"language": "zh"}, {"b", "e"}),
    ("scalar field: a number never equals a string field", {"source": 1}, set()),
    ("scalar field: wrong types among values are dropped", {"title": ["b", 2, None]}, {"b"}),
    ("scalar field: a string never equals the int field", {"chunk_index": "0"}, set()),
    ("scalar field: False is 0, as in Python", {"chunk_index": False}, ALL),
    ("scalar field: a float equal to the int", {"chunk_index": [0.0]}, ALL),
    ("bool true equals 1, as in Python and Milvus", {"n": True}, {"a"}),
    ("float equal to an int", {"n": 1.0}, {"a"}),
    ("scalar and JSON keys together", {"language": "en", "n": [1, 2.5, 3]}, {"a", "c", "d"}),
    ("nested dict value (no expression: matched by predicate)", {"nested": {"k": 1}}, {"d"}),
    ("a list-valued field equals no single value", {"tags": "x"}, set()),
    ("a list-valued field among values", {"tags": ["x", "y"]}, set()),
    ("a list-valued field in a set", {"tags": {"x"}}, set()),
    ("predicate", lambda md: md.get("n", 0) >= 2, {"b", "c", "d"}),
]
BAD: list[tuple[str, Any, str]] = [  # (case, filter, what the error must name)
    ("not a dict", "file_type=markdown", "got str: 'file_type=markdown'"),
    ("a list of pairs", [("file_type", "markdown")], "got list"),
    ("int key", {1: "x"}, "got 1"),
    ("empty key", {"": "x"}, "got ''"),
    ("generator value", {"n": (i for i in [1, 2])}, "'n' must be a value or a list/tuple/set of values, got generator"),
    ("range value", {"n": range(3)}, "'n' .* got range: range\\(0, 3\\)"),
    ("array value", {"n": np.array([1, 2])}, "'n' .* got ndarray"),
]


@pytest.fixture(scope="module")
def milvus_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (pip install 'ctxrag[milvus]')")
    from ctxrag.stores.milvus_resident.store import MilvusResidentStore

    store = MilvusResidentStore(tmp_path_factory.mktemp("milvus") / "kb.db", "t")
    store.write_documents(_documents())
    yield store
    store.close()


@pytest.fixture(params=["memory", "sqlite", "milvus"])
def allowed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Any], set[str]]]:
    """The chunk names a filter allows, answered by one of the three."""
    def names(ids: Any) -> set[str]:
        return {cid.split(":")[0][2:] for cid in ids}

    if request.param == "memory":
        records = {name: _metadata(name) for name in EXTRA}
        yield lambda flt: {name for name, md in records.items() if metadata_matches(md, flt)}
    elif request.param == "sqlite":
        store = DocStore(tmp_path / "docs.sqlite")
        for doc, chunks, _ in _documents():
            store.upsert_document(doc, chunks)
        lookup = DocStoreChunkLookup(store, lambda: 1)
        answer = lambda flt: names(lookup.allowed_chunk_ids(flt))  # noqa: E731
        answer.lookup = lookup  # type: ignore[attr-defined]
        yield answer
        store.close()
    else:
        from ctxrag.stores.milvus_resident.views import MilvusChunkLookup

        milvus_lookup = MilvusChunkLookup(request.getfixturevalue("milvus_store"))
        answer = lambda flt: names(set(milvus_lookup.allowed_chunk_ids(flt)))  # noqa: E731 - set(): one Milvus query
        answer.lookup = milvus_lookup  # type: ignore[attr-defined]
        yield answer


def test_no_filter_is_no_restriction(allowed: Callable[[Any], set[str]]) -> None:
    lookup = getattr(allowed, "lookup", None)
    if lookup is None:  # in memory
        assert metadata_matches({}, None) and matcher(None)({"x": 1}) and allowed(None) == ALL
    else:  # a lookup answers None: no restriction, nothing to list
        assert lookup.allowed_chunk_ids(None) is None


@pytest.mark.parametrize(("flt", "expected"), [(flt, expected) for _, flt, expected in TABLE],
                         ids=[case for case, _, _ in TABLE])
def test_the_same_chunks_match_everywhere(allowed: Callable[[Any], set[str]], flt: Any, expected: set[str]) -> None:
    assert allowed(flt) == expected
    assert allowed(flt) == expected  # again: the SQLite lookup answers the second time from its cache


@pytest.mark.parametrize(("flt", "message"), [(flt, message) for _, flt, message in BAD],
                         ids=[case for case, _, _ in BAD])
def test_a_bad_filter_fails_naming_the_key_or_value(allowed: Callable[[Any], set[str]], flt: Any,
                                                     message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        allowed(flt)


def test_milvus_expressions() -> None:
    assert milvus_expression({}) == ""
    assert milvus_expression({"source": "a.md"}) == 'source == "a.md"'
    assert milvus_expression({"doc_id": ["d1", "d2"]}) == 'doc_id in ["d1", "d2"]'
    assert milvus_expression({"chunk_index": 3}) == "chunk_index == 3"
    assert milvus_expression({"file_type": "markdown"}) == 'metadata["file_type"] == "markdown"'
    assert milvus_expression({"file_type": ["markdown", "text"]}) == \
        '(metadata["file_type"] == "markdown" or metadata["file_type"] == "text")'
    assert milvus_expression({"file_type": frozenset({"text"})}) == '(metadata["file_type"] == "text")'
    assert milvus_expression({"flag": True}) == 'metadata["flag"] == true'
    assert milvus_expression({"title": '星河 "quoted"'}) == 'title == "星河 \\"quoted\\""'
    assert milvus_expression({"source": "a", "language": "zh"}) == 'language == "zh" and source == "a"'
    assert milvus_expression({"source": []}) == milvus_expression({"source": "a", "file_type": ()}) == NOTHING
    assert milvus_expression({"tags": None}) is None and milvus_expression({"tags": [{"a": 1}]}) is None
    assert ids_expression({"b:0", 'a"q:0'}) == 'chunk_id in ["a\\"q:0", "b:0"]' and ids_expression([]) == "chunk_id in []"


def test_filter_key_names_the_meaning() -> None:
    assert filter_key({"a": ["x", "y"], "b": 1}) == filter_key({"b": 1, "a": ("y", "x")}) \
        == filter_key({"a": frozenset({"x", "y"}), "b": 1})
    assert filter_key({"a": frozenset({"x"})}) != filter_key({"a": "frozenset({'x'})"})
    assert filter_key({"a": 1}) != filter_key({"a": "1"}) and filter_key({"a": None}) != filter_key({"a": "None"})
