"""The allowed chunk ids of a Milvus-resident knowledge base as Milvus expressions (no Milvus needed): `FilteredIds`
listing its ids only when asked. The filter translation itself is tested in tests/stores/test_store_filters.py."""
from __future__ import annotations

from ctxrag.stores.filters import NOTHING, ids_expression
from ctxrag.stores.milvus_resident.expressions import FilteredIds, allowed_expression


def test_nothing_first() -> None:
    assert allowed_expression(None) == "" and allowed_expression(set()) == NOTHING


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
