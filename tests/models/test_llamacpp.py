"""`LocalLlamaChatModel` as a full LangChain chat model: structured output in every mode and tool calls, sync, async
and streaming. The wiring tests run without a model file; the ``llm`` tests, about the class's mechanics (grammar,
tool calls, streaming), run the real 0.5B GGUF (the session's ``small_chat_model``, copied with a small
``max_tokens``)."""
from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableBinding, RunnableSequence
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from ctxrag.models.llamacpp import LocalLlamaChatModel


class Capital(BaseModel):
    """The capital city of a country."""

    city: str = Field(max_length=30)
    country: str = Field(max_length=30)


class CapitalDict(TypedDict):
    """The capital city of a country."""

    city: str
    country: str


CAPITAL_SCHEMA = {
    "title": "Capital",
    "description": "The capital city of a country.",
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}, "country": {"type": "string", "maxLength": 30}},
    "required": ["city", "country"],
}
QUESTION = "What is the capital of France?"


def add(a: int, b: int) -> int:
    """Add two integers a and b."""
    return a + b


def _unloaded() -> LocalLlamaChatModel:
    return LocalLlamaChatModel(model_path="not-loaded.gguf")


# ------------------------------------------------------------------------------------------- wiring (no model)


@pytest.mark.parametrize("method, bound", [
    ("json_schema", "response_format"), ("json_mode", "response_format"), ("function_calling", "tools"),
])
def test_with_structured_output_binds_the_request(method: str, bound: str) -> None:
    chain = _unloaded().with_structured_output(Capital, method=method)
    assert isinstance(chain, RunnableSequence)
    binding = chain.first
    assert isinstance(binding, RunnableBinding) and bound in binding.kwargs
    traced = binding.kwargs["ls_structured_output_format"]
    assert traced["kwargs"]["method"] == method and traced["schema"]["title"] == "Capital"


def test_structured_output_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match="'xml'"):
        _unloaded().with_structured_output(Capital, method="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="temperature"):
        _unloaded().with_structured_output(Capital, temperature=1)


def test_bind_tools_formats_tools_and_checks_the_choice() -> None:
    bound = _unloaded().bind_tools([add], tool_choice="add")
    assert bound.kwargs["tools"][0]["function"]["name"] == "add" and bound.kwargs["tool_choice"] == "add"
    with pytest.raises(ValueError, match=r"'mul'.*\['add'\]"):
        _unloaded().bind_tools([add], tool_choice="mul")


def test_ls_params_follow_per_call_model_and_stop() -> None:
    params = _unloaded()._get_ls_params(stop=["\n"], model="other")
    assert params["ls_provider"] == "llamacpp" and params["ls_model_name"] == "other" and params["ls_stop"] == ["\n"]


# ------------------------------------------------------------------------------------------- real model

@pytest.fixture
def llm(small_chat_model: LocalLlamaChatModel) -> LocalLlamaChatModel:
    return small_chat_model.model_copy(update={"max_tokens": 48})


def _is_paris(city: str, country: str) -> None:
    assert "paris" in city.lower() and "france" in country.lower()


@pytest.mark.llm
def test_structured_output_pydantic(llm: LocalLlamaChatModel) -> None:
    out = llm.with_structured_output(Capital).invoke(QUESTION)
    assert isinstance(out, Capital)
    _is_paris(out.city, out.country)


@pytest.mark.llm
def test_structured_output_schema_dict_and_typeddict(llm: LocalLlamaChatModel) -> None:
    for schema in (CAPITAL_SCHEMA, CapitalDict):
        out = llm.with_structured_output(schema).invoke(QUESTION)
        assert isinstance(out, dict) and set(out) == {"city", "country"}
        _is_paris(out["city"], out["country"])


@pytest.mark.llm
def test_structured_output_function_calling_and_json_mode(llm: LocalLlamaChatModel) -> None:
    out = llm.with_structured_output(Capital, method="function_calling").invoke(QUESTION)
    assert isinstance(out, Capital)
    _is_paris(out.city, out.country)
    data = llm.with_structured_output(CAPITAL_SCHEMA, method="json_mode").invoke(
        QUESTION + ' Reply as JSON: {"city": ..., "country": ...}')
    assert isinstance(data, dict)


@pytest.mark.llm
def test_structured_output_include_raw_and_a_cut_off_reply(llm: LocalLlamaChatModel) -> None:
    out = llm.with_structured_output(Capital, include_raw=True).invoke(QUESTION)
    assert isinstance(out["raw"], AIMessage) and out["parsing_error"] is None
    assert json.loads(out["raw"].content) == out["parsed"].model_dump()
    cut = llm.model_copy(update={"max_tokens": 4}).with_structured_output(Capital, include_raw=True).invoke(QUESTION)
    assert cut["parsed"] is None and cut["parsing_error"] is not None  # the reply, not an exception
    assert cut["raw"].response_metadata["finish_reason"] == "length"


@pytest.mark.llm
def test_forced_tool_call_and_tool_message_round_trip(llm: LocalLlamaChatModel) -> None:
    with_tools = llm.bind_tools([add], tool_choice="add")
    question = HumanMessage("What is 17 + 25? Use the tool.")
    reply = with_tools.invoke([question])
    assert reply.content == "" and reply.response_metadata["finish_reason"] == "tool_calls"
    (call,) = reply.tool_calls
    assert call["name"] == "add" and call["args"] == {"a": 17, "b": 25}
    result = ToolMessage(str(add(**call["args"])), tool_call_id=call["id"])
    final = llm.bind_tools([add]).invoke([question, reply, result])  # tool_choice auto: it may call again
    assert final.tool_calls == [] and final.invalid_tool_calls == []
    assert "42" in final.content  # the answer, from the tool's result


@pytest.mark.llm
def test_auto_tool_choice_calls_a_tool_when_the_model_decides_to(llm: LocalLlamaChatModel) -> None:
    reply = llm.bind_tools([add]).invoke("What is 1 + 2? Use the tool.")
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("add", {"a": 1, "b": 2})]
    plain = llm.bind_tools([add], tool_choice="none").invoke("Say hello.")
    assert plain.tool_calls == [] and plain.content


@pytest.mark.llm
def test_streamed_tool_call_comes_as_tool_call_chunks(llm: LocalLlamaChatModel) -> None:
    chunks = list(llm.bind_tools([add], tool_choice="any").stream("What is 3 + 4?"))
    assert sum(bool(c.tool_call_chunks) for c in chunks) > 1  # the arguments arrive piece by piece
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [("add", {"a": 3, "b": 4})]
    assert full.usage_metadata["output_tokens"] > 0


@pytest.mark.llm
def test_replies_carry_llama_cpp_s_timings_whole_and_streamed(llm: LocalLlamaChatModel) -> None:
    whole = llm.invoke("Name a colour.")
    timings = whole.response_metadata["timings"]
    assert set(timings) == {"prompt_eval_tokens", "prompt_eval_s", "decode_tokens", "decode_s"}
    assert timings["decode_tokens"] > 0 and timings["decode_s"] > 0
    chunks = list(llm.stream("Name a fruit."))
    assert chunks[-1].response_metadata["timings"]["decode_tokens"] > 0
    assert all("timings" not in c.response_metadata for c in chunks[:-1])


@pytest.mark.llm
def test_streamed_structured_output_ends_with_the_whole_object(llm: LocalLlamaChatModel) -> None:
    parts = list(llm.with_structured_output(CAPITAL_SCHEMA).stream(QUESTION))
    assert len(parts) > 1  # JSON parsed as it grows
    _is_paris(parts[-1]["city"], parts[-1]["country"])


@pytest.mark.llm
async def test_async_structured_output_and_tool_call(llm: LocalLlamaChatModel) -> None:
    out = await llm.with_structured_output(Capital).ainvoke(QUESTION)
    _is_paris(out.city, out.country)
    full = None
    async for chunk in llm.bind_tools([add], tool_choice="add").astream("What is 5 + 6?"):
        full = chunk if full is None else full + chunk
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [("add", {"a": 5, "b": 6})]
