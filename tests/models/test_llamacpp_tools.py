"""Fast tests of the tool-call / structured-output plumbing of the local model (no model loaded)."""
from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from ctxrag.models.llamacpp_grammars import grammar
from ctxrag.models.llamacpp_tools import (
    ANSWER_NOTE,
    ToolRequest,
    chat_dicts,
    repeats_answered_calls,
    with_answer_note,
)
from ctxrag.models.tool_call_parsing import ArgumentsStream


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def now() -> str:
    """The current time."""
    return "12:00"


TOOLS = [convert_to_openai_tool(add), convert_to_openai_tool(now)]


def test_no_tools_no_format_is_free_text() -> None:
    req = ToolRequest.from_kwargs({})
    assert (req.tools, req.forced_names, req.json_schema, req.constrained) == ([], [], None, False)
    assert req.grammar_schema() is None
    assert req.parse("hello") == ("hello", [], [])


@pytest.mark.parametrize("choice, forced", [
    (None, []), ("auto", []), ("any", ["add", "now"]), ("required", ["add", "now"]), (True, ["add", "now"]),
    ("add", ["add"]), ({"type": "function", "function": {"name": "now"}}, ["now"]),
])
def test_tool_choice_decides_what_is_forced(choice: object, forced: list[str]) -> None:
    assert ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": choice}).forced_names == forced


def test_tool_choice_none_unbinds_the_tools() -> None:
    req = ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": "none"})
    assert req.tools == [] and req.system_text() is None


def test_unknown_tool_choice_names_the_bound_tools() -> None:
    with pytest.raises(ValueError, match=r"'divide'.*\['add', 'now'\]"):
        ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": "divide"})
    with pytest.raises(ValueError, match="tool_choice=3"):
        ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": 3})


def test_forced_schema_wraps_name_and_arguments() -> None:
    one = ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": "add"}).grammar_schema()
    assert one["properties"]["name"] == {"const": "add"}
    assert set(one["properties"]["arguments"]["properties"]) == {"a", "b"}
    both = ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": "any"}).grammar_schema()
    assert [o["properties"]["name"]["const"] for o in both["anyOf"]] == ["add", "now"]
    assert both["anyOf"][1]["properties"]["arguments"] == {"type": "object", "properties": {}}  # no-argument tool


@pytest.mark.parametrize("fmt, schema", [
    ({"type": "json_object"}, {}),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}, {"type": "object"}),
    ({"type": "text"}, None),
])
def test_response_format(fmt: dict, schema: dict | None) -> None:
    assert ToolRequest.from_kwargs({"response_format": fmt}).grammar_schema() == schema


def test_bad_response_format_names_it() -> None:
    with pytest.raises(ValueError, match="'xml'"):
        ToolRequest.from_kwargs({"response_format": {"type": "xml"}})
    with pytest.raises(ValueError, match="json_schema.schema"):
        ToolRequest.from_kwargs({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})


def test_parse_forced_call() -> None:
    req = ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": "add"})
    content, calls, invalid = req.parse('{"name": "add", "arguments": {"a": 1, "b": 2}}')
    assert content == "" and invalid == []
    assert (calls[0]["name"], calls[0]["args"]) == ("add", {"a": 1, "b": 2}) and calls[0]["id"].startswith("call_")


def test_parse_auto_reply_with_tagged_calls_and_text() -> None:
    req = ToolRequest.from_kwargs({"tools": TOOLS})
    reply = ('Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
             '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')
    content, calls, invalid = req.parse(reply)
    assert content == "Let me add."
    assert [(c["name"], c["args"]) for c in calls] == [("add", {"a": 1, "b": 2}), ("now", {})]
    assert invalid == []


def test_parse_auto_bare_json_call_and_plain_text() -> None:
    req = ToolRequest.from_kwargs({"tools": TOOLS})
    assert req.parse('```json\n{"name": "now", "arguments": {}}\n```')[1][0]["name"] == "now"
    assert req.parse("It is noon.") == ("It is noon.", [], [])
    assert req.parse('{"answer": 3}') == ('{"answer": 3}', [], [])  # JSON, but not a call: text


def test_parse_call_of_unknown_tool_is_invalid() -> None:
    req = ToolRequest.from_kwargs({"tools": TOOLS})
    _, calls, invalid = req.parse('<tool_call>{"name": "divide", "arguments": {"a": 1}}</tool_call>')
    assert calls == [] and invalid[0]["name"] == "divide" and "add" in invalid[0]["error"]
    _, calls, invalid = req.parse("<tool_call>not json</tool_call>")
    assert calls == [] and invalid[0]["args"] == "not json"


def test_chat_dicts_write_tools_calls_and_results_in_the_qwen_convention() -> None:
    req = ToolRequest.from_kwargs({"tools": TOOLS})
    call = {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"}
    dicts = chat_dicts([
        SystemMessage("Be brief."),
        HumanMessage("1+2?"),
        AIMessage("", tool_calls=[call, {**call, "id": "c2"}]),
        ToolMessage("3", tool_call_id="c1"),
        ToolMessage("3", tool_call_id="c2"),
    ], req)
    assert [d["role"] for d in dicts] == ["system", "user", "assistant", "user"]
    assert dicts[0]["content"].startswith("Be brief.\n\n# Tools") and '"name": "add"' in dicts[0]["content"]
    assert dicts[2]["content"].count("<tool_call>") == 2
    assert json.loads(dicts[2]["content"].split("\n")[1]) == {"name": "add", "arguments": {"a": 1, "b": 2}}
    assert dicts[3]["content"] == "<tool_response>\n3\n</tool_response>\n<tool_response>\n3\n</tool_response>"


def _call(name: str, args: dict, id_: str) -> dict:
    return {"name": name, "args": args, "id": id_, "type": "tool_call"}


def test_a_repeat_of_an_answered_call_is_a_loop_a_new_call_is_not() -> None:
    history = [HumanMessage("1+2? then the time"), AIMessage("", tool_calls=[_call("add", {"a": 1, "b": 2}, "c1")]),
               ToolMessage("3", tool_call_id="c1")]
    assert repeats_answered_calls(history, [_call("add", {"b": 2, "a": 1}, "c9")])
    assert not repeats_answered_calls(history, [_call("add", {"a": 1, "b": 2}, "c9"), _call("now", {}, "c8")])
    assert not repeats_answered_calls(history, [])
    unanswered = history[:2]  # the call was made but its result never came: calling again is not a loop
    assert not repeats_answered_calls(unanswered, [_call("add", {"a": 1, "b": 2}, "c9")])


def test_answer_note_follows_the_last_tool_results() -> None:
    dicts = chat_dicts([HumanMessage("1+2?"), AIMessage("", tool_calls=[_call("add", {"a": 1, "b": 2}, "c1")]),
                        ToolMessage("3", tool_call_id="c1")])
    noted = with_answer_note(dicts)
    assert noted[:-1] == dicts[:-1] and noted[-1]["content"] == f"<tool_response>\n3\n</tool_response>\n{ANSWER_NOTE}"
    assert with_answer_note([{"role": "user", "content": "hi"}]) == [{"role": "user", "content": "hi"}]


def test_chat_dicts_without_system_message_gets_one_for_tools() -> None:
    dicts = chat_dicts([HumanMessage("hi")], ToolRequest.from_kwargs({"tools": TOOLS}))
    assert dicts[0]["role"] == "system" and "<tools>" in dicts[0]["content"]
    assert chat_dicts([HumanMessage([{"type": "text", "text": "hi"}])]) == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("text", [
    '{"name": "add", "arguments": {"a": 1, "b": 22}}',
    '{"arguments": {"name": "x}", "b": 22}, "name": "add"}',  # arguments first, with a "name" of their own
])
@pytest.mark.parametrize("step", [1, 3])
def test_arguments_stream_gives_chunks_that_add_up_to_the_call(text: str, step: int) -> None:
    stream = ArgumentsStream()
    pieces = []
    for i in range(0, len(text), step):
        pieces += stream.feed(text[i : i + step])
    pieces += stream.finish()
    assert pieces[0]["id"] == stream.id and all(p["id"] is None for p in pieces[1:])
    assert [p["name"] for p in pieces if p["name"]] == ["add"]
    merged = AIMessageChunk(content="", tool_call_chunks=pieces[:1])
    for p in pieces[1:]:
        merged = merged + AIMessageChunk(content="", tool_call_chunks=[p])
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [("add", json.loads(text)["arguments"])]


def test_grammar_is_cached_and_bad_schema_is_named() -> None:
    pytest.importorskip("llama_cpp")
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    assert grammar(schema) is grammar(dict(schema))
    with pytest.raises(ValueError, match="JSON schema"):
        grammar({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})


# -- every call shape the 1.5B writes, and the constrained turn after tool results ----------------------------------

SEARCH = convert_to_openai_tool(add)


@pytest.mark.parametrize("reply", [
    # seen from the local 1.5B after a ToolMessage (issue: agents): a fenced block after prose
    'The answer is not directly available.\n```json\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```',
    # a fence without a language, and OpenAI's shape
    '```\n{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}\n```',
    # the tag of the tool description, imitated
    '<tools>{"name": "add", "arguments": {"a": 1, "b": 2}}</tools>',
    '<function_call>{"name": "add", "parameters": {"a": 1, "b": 2}}</function_call>',
    # the call described in prose with its JSON inline (seen from the 1.5B after results)
    'You can use the add function. The response will be:\n\n{"name": "add", "arguments": {"a": 1, "b": 2}}',
    # the arguments as a JSON string, as OpenAI writes them
    '{"type": "function", "function": {"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}}',
])
def test_every_call_shape_becomes_a_tool_call(reply: str) -> None:
    content, calls, invalid = ToolRequest.from_kwargs({"tools": TOOLS}).parse(reply)
    assert [(c["name"], c["args"]) for c in calls] == [("add", {"a": 1, "b": 2})] and invalid == []
    assert "```" not in content and "<" not in content


def test_a_fenced_block_that_is_no_call_stays_in_the_answer() -> None:
    reply = "Use it like this:\n```python\nprint(add(1, 2))\n```\nand it prints 3."
    assert ToolRequest.from_kwargs({"tools": TOOLS}).parse(reply) == (reply, [], [])


def test_an_echoed_signature_is_an_invalid_call_not_an_answer() -> None:
    echoed = f"<tools>{json.dumps(TOOLS[0])}</tools>"  # the model copies the tool description
    content, calls, invalid = ToolRequest.from_kwargs({"tools": TOOLS}).parse(echoed)
    assert calls == [] and len(invalid) == 1 and invalid[0]["name"] == "add" and content == ""


def _turn(*messages) -> ToolRequest:  # noqa: ANN002
    return ToolRequest.from_kwargs({"tools": TOOLS}).after(list(messages))


CALL = AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"}])


def test_the_first_tool_turn_is_a_call_or_an_answer_as_json() -> None:
    first = _turn(SystemMessage("s"), HumanMessage("1+2?"))
    assert first.turn == "decide" and first.constrained
    options = first.grammar_schema()["anyOf"]
    assert [o["properties"]["name"]["const"] for o in options[:2]] == ["add", "now"]  # the calls are offered first
    assert options[2] == {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    assert first.grammar() is not None  # llama.cpp compiles it
    assert first.parse('{"answer": "Hello."}') == ("Hello.", [], [])
    content, calls, _ = first.parse('{"name": "add", "arguments": {"a": 1, "b": 2}}')
    assert content == "" and calls[0]["args"] == {"a": 1, "b": 2}


def test_the_turn_after_tool_results_is_a_tagged_call_or_prose() -> None:
    after = _turn(HumanMessage("1+2?"), CALL, ToolMessage("3", tool_call_id="c1"))
    assert after.turn == "results" and after.constrained and after.grammar_schema() is None
    assert after.grammar() is not None and after.answering().grammar() is not None  # both compile
    assert after.parse("It is 3.") == ("It is 3.", [], [])
    content, calls, _ = after.parse('<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')
    assert content == "" and [c["name"] for c in calls] == ["now"]


def test_forced_structured_and_unbound_turns_are_not_changed() -> None:
    forced = ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": "add"}).after([ToolMessage("3", tool_call_id="c")])
    assert forced.turn == "free" and forced.forced_names == ["add"]
    none = ToolRequest.from_kwargs({"tools": TOOLS, "tool_choice": "none"}).after([ToolMessage("3", tool_call_id="c")])
    assert none.turn == "free" and none.grammar() is None
    structured = ToolRequest.from_kwargs({"response_format": {"type": "json_object"}}).after([HumanMessage("x")])
    assert structured.turn == "free" and structured.grammar() is not None
