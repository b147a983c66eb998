"""`ctxrag.models.tool_call_parsing`: every shape a small model writes a call in becomes a call, the rest stays text."""
from __future__ import annotations

import pytest

from ctxrag.models.tool_call_parsing import ArgumentsStream, parse_free_reply

TOOLS = [{"type": "function", "function": {"name": "search_kb", "parameters": {}}}]


@pytest.mark.parametrize("reply, content", [
    ('<tool_call>{"name": "search_kb", "arguments": {"q": "P1"}}</tool_call>', ""),
    ('Let me look. <function_call>{"name": "search_kb", "arguments": {"q": "P1"}}</function_call>', "Let me look."),
    ('Sure:\n```json\n{"name": "search_kb", "arguments": {"q": "P1"}}\n```', "Sure:"),
    ('{"name": "search_kb", "parameters": {"q": "P1"}}', ""),
    ('You can use it: {"type": "function", "function": {"name": "search_kb", "arguments": "{\\"q\\": \\"P1\\"}"}} ok',
     "You can use it:  ok"),
])
def test_each_shape_of_a_call_becomes_one_call(reply: str, content: str) -> None:
    text, calls, invalid = parse_free_reply(reply, TOOLS)
    assert [(c["name"], c["args"]) for c in calls] == [("search_kb", {"q": "P1"})]
    assert (text, invalid) == (content, [])


def test_a_call_of_an_unbound_tool_or_an_echoed_signature_is_invalid_not_an_answer() -> None:
    _, calls, invalid = parse_free_reply('<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>', TOOLS)
    assert calls == [] and invalid[0]["name"] == "delete_all"
    echoed = '<tools>{"name": "search_kb", "parameters": {"type": "object", "properties": {"q": {}}}}</tools>'
    _, calls, invalid = parse_free_reply(echoed, TOOLS)
    assert calls == [] and len(invalid) == 1


def test_prose_and_code_that_is_no_call_stay_text() -> None:
    reply = "Use `pip install ctxrag`:\n```python\nprint({'name': 1})\n```"
    assert parse_free_reply(reply, TOOLS) == (reply, [], [])


def test_a_streamed_call_gives_its_arguments_as_they_grow_and_its_name_once() -> None:
    stream = ArgumentsStream()
    chunks = [c for part in ['{"name": "sea', 'rch_kb", "argu', 'ments": {"q": "P', '1"}}'] for c in stream.feed(part)]
    chunks += stream.finish()
    assert "".join(c["args"] for c in chunks) == '{"q": "P1"}'
    assert [c["name"] for c in chunks if c["name"]] == ["search_kb"]
    assert [c["id"] for c in chunks if c["id"]] == [stream.id]
