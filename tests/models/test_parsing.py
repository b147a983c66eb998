from __future__ import annotations

import pytest

from ctxrag.models.parsing import extract_json, parse_number, parse_yes_no


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("[1, 2, 3]", [1, 2, 3]),
        ('```json\n{"score": 3}\n```', {"score": 3}),
        ("Sure! ```json\n{'score': 3,}\n``` hope this helps", {"score": 3}),
        ("```\n[\"x\", \"y\"]\n```", ["x", "y"]),
        ('Here you go: {"answer": "Paris", "confidence": 0.9}. Anything else?', {"answer": "Paris", "confidence": 0.9}),
        ("{'name': 'Ann', 'tags': ['a', 'b',],}", {"name": "Ann", "tags": ["a", "b"]}),
        ("{'ok': True, 'none': None, 'no': False}", {"ok": True, "none": None, "no": False}),
        ("prose {not json} then {'ok': 'don't'}", {"ok": "don't"}),
        ('{"text": "a } inside and a { too"} trailing', {"text": "a } inside and a { too"}),
        ('{"quote": "she said \\"hi\\""}', {"quote": 'she said "hi"'}),
        ('{"outer": {"inner": [1, {"deep": true}]}}', {"outer": {"inner": [1, {"deep": True}]}}),
        ('实体：{"实体": ["北京", "上海"]}', {"实体": ["北京", "上海"]}),
        ("```json\n{\"unterminated\": 1\n```\n{\"second\": 2}", {"second": 2}),
        ("```json\n{\"a\": 1}", {"a": 1}),  # the model stopped before closing the fence
    ],
)
def test_extract_json_recovers_the_first_value(reply: str, expected: object) -> None:
    assert extract_json(reply) == expected


def test_extract_json_prefers_the_first_of_several() -> None:
    assert extract_json('[1] and then {"b": 2}') == [1]


@pytest.mark.parametrize("reply", ["", "   ", "no json here", "just a number 42", '"a string"', "{broken: [}", "{'a': }"])
def test_extract_json_raises_with_an_excerpt(reply: str) -> None:
    with pytest.raises(ValueError, match="no JSON object or array") as info:
        extract_json(reply)
    assert repr(reply.strip()) in str(info.value)


def test_extract_json_excerpt_is_shortened() -> None:
    with pytest.raises(ValueError) as info:
        extract_json("x" * 1000)
    assert len(str(info.value)) < 300 and "..." in str(info.value)


def test_extract_json_rejects_non_text() -> None:
    with pytest.raises(TypeError, match="str"):
        extract_json(b'{"a": 1}')  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Yes", True),
        ("yes.", True),
        ("YES, the passage answers it.", True),
        ("Yes, but not fully", True),
        ("No", False),
        ("no, it does not", False),
        ("No. Yes would be wrong", False),
        ("Answer: yes", True),
        ("Answer: No.", False),
        ("**Yes**", True),
        ("True", True),
        ("false", False),
        ("Relevant", True),
        ("Irrelevant.", False),
        ("Not relevant", False),
        ("是", True),
        ("是的，相关。", True),
        ("相关", True),
        ("不相关", False),
        ("否", False),
        ("不是", False),
        ('{"relevant": "yes"}', True),
        ('{"relevant": false}', False),
        ("maybe", None),
        ("I think the passage talks about cats", None),
        ("", None),
        ("   ", None),
    ],
)
def test_parse_yes_no(reply: str, expected: bool | None) -> None:
    assert parse_yes_no(reply) is expected


@pytest.mark.parametrize(
    ("reply", "lo", "hi", "expected"),
    [
        ("7", 0, 10, 7.0),
        ("Score: 8/10", 0, 10, 8.0),
        ("Relevance: 0.85", 0, 1, 0.85),
        ("I rate it 15, no wait, 3", 0, 10, 3.0),
        ("-1 then 0.5", 0, 1, 0.5),
        ("2.5e-1", 0, 1, 0.25),
        (".5", 0, 1, 0.5),
        ("score = 10", 0, 10, 10.0),
        ("分数：4 分", 1, 5, 4.0),
        ("none", 0, 1, None),
        ("", 0, 1, None),
        ("100", 0, 10, None),
        ("8/10", 11, 20, None),  # the scale after the slash never counts
    ],
)
def test_parse_number(reply: str, lo: float, hi: float, expected: float | None) -> None:
    assert parse_number(reply, lo, hi) == expected


def test_parse_number_rejects_an_empty_range() -> None:
    with pytest.raises(ValueError, match="lo=5"):
        parse_number("3", 5, 1)
