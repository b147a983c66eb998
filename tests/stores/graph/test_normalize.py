from __future__ import annotations

import pytest

from ctxrag.stores.graph.normalize import clean_text, entity_key, relation_key, relation_text


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("leonhard Euler", "Leonhard Euler"),
        ("Leonhard   Euler", "Leonhard Euler"),
        ("Leonhard Euler.", "Leonhard Euler"),
        ("\u201cLeonhard Euler\u201d", "Leonhard Euler"),
        ("U.S.", "US"),
        ("Euler's", "Euler"),
        ("Person - centered therapy", "person-centered therapy"),
        ("莱昂哈德·欧拉", "莱昂哈德 欧拉"),
        ("ＬＥＯＮＨＡＲＤ", "leonhard"),  # full-width
    ],
)
def test_same_entity_same_key(a: str, b: str) -> None:
    assert entity_key(a) == entity_key(b)


@pytest.mark.parametrize(("a", "b"), [("Johann Bernoulli", "Jakob Bernoulli"), ("1705", "1707"), ("北京", "南京")])
def test_different_entities_differ(a: str, b: str) -> None:
    assert entity_key(a) != entity_key(b)


def test_punctuation_only_is_empty() -> None:
    assert entity_key(" ... -- ") == ""


def test_clean_text_keeps_case_and_rejects_non_str() -> None:
    assert clean_text("  Daniel\n Bernoulli ") == "Daniel Bernoulli"
    with pytest.raises(TypeError, match="42"):
        clean_text(42)  # type: ignore[arg-type]


def test_relation_key_and_text() -> None:
    assert relation_key("Euler", "student of", "Johann Bernoulli") == relation_key("euler", "Student  of", "johann bernoulli.")
    assert relation_key("A", "p", "B") != relation_key("B", "p", "A")
    assert relation_text(" Leonhard  Euler", "student of", "Johann Bernoulli ") == "Leonhard Euler student of Johann Bernoulli"
