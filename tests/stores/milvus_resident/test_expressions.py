"""Metadata filters as Milvus expressions (no Milvus needed): every value kind, the cases that cannot be pushed
down, and `FilteredIds` listing its ids only when asked."""
from __future__ import annotations

import pytest

from ctxrag.errors import ConfigError
from ctxrag.stores.milvus_resident.expressions import (
    NOTHING, FilteredIds, allowed_expression, filter_expression, ids_expression,
)


def test_empty_and_nothing_first() -> None:
    assert filter_expression({}) == ""
    assert filter_expression({"source": []}) == NOTHING
    assert filter_expression({"source": "a", "file_type": []}) == NOTHING
    assert allowed_expression(None) == "" and allowed_expression(set()) == NOTHING


@pytest.mark.parametrize(("flt", "expr"), [
    ({"source": "a.md"}, 'source == "a.md"'),
    ({"doc_id": ["d1", "d2"]}, 'doc_id in ["d1", "d2"]'),
    ({"chunk_index": 3}, "chunk_index == 3"),
    ({"file_type": "markdown"}, 'metadata["file_type"] == "markdown"'),
    ({"file_type": ["markdown", "text"]}, '(metadata["file_type"] == "markdown" or metadata["file_type"] == "text")'),
    ({"flag": True}, 'metadata["flag"] == true'),
    ({"title": '星河 "quoted"'}, 'title == "星河 \\"quoted\\""'),
    ({"source": "a", "language": "zh"}, 'language == "zh" and source == "a"'),
])
def test_dict_filters_become_expressions(flt: dict, expr: str) -> None:
    assert filter_expression(flt) == expr


def test_values_no_expression_states_are_not_pushed_down() -> None:
    assert filter_expression({"tags": None}) is None
    assert filter_expression({"tags": [{"a": 1}]}) is None
    with pytest.raises(ConfigError, match="non-empty strings"):
        filter_expression({"": "x"})


def test_filtered_ids_list_lazily_and_carry_their_expression() -> None:
    calls = []

    def list_ids(expr: str) -> set[str]:
        calls.append(expr)
        return {"a:0", "b:0"}

    allowed = FilteredIds('source == "a"', list_ids)
    assert allowed and not calls  # truthiness does not list
    assert allowed_expression(allowed) == 'source == "a"' and not calls
    assert "a:0" in allowed and len(allowed) == 2 and sorted(allowed) == ["a:0", "b:0"]
    assert calls == ['source == "a"']  # listed once
    assert allowed_expression({"x:1", "a:0"}) == ids_expression(["a:0", "x:1"]) == 'chunk_id in ["a:0", "x:1"]'
    assert allowed & {"a:0", "z:9"} == {"a:0"} and isinstance(allowed | {"z:9"}, set)
