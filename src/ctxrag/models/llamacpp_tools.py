"""Tool calls and structured output for the local llama.cpp chat model: what the model is made to write, and how its
reply becomes ``AIMessage.tool_calls``.

One mechanism serves both: a JSON schema turned into a llama.cpp grammar (``LlamaGrammar.from_json_schema``), so the
sampler can only pick tokens that keep the reply valid JSON of that schema.

- **Forced tool** (``tool_choice`` a tool name, ``"any"``/``"required"`` or ``True``): the reply must be one call,
  ``{"name": <a bound tool>, "arguments": <that tool's parameters>}``; it becomes one tool call.
- **Structured output** (``response_format`` ``json_schema`` / ``json_object``): the reply must be JSON matching the
  schema (any JSON object for ``json_object``).
- **Auto** (tools bound, ``tool_choice`` ``"auto"`` or unset): nothing is constrained. The tools are described in the
  system message in Qwen2.5's native convention (``<tools>`` signatures, calls written as
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``) and every such block in the reply, or a reply that is
  just such a JSON call, becomes a tool call; the rest stays the text content.

Tool calls and tool results in the history are written back in the same convention (``<tool_call>`` in the assistant
turn, ``<tool_response>`` in a user turn), so a ToolMessage round trip reads the way the model was trained on,
whatever chat template the GGUF carries. A small model shown the result often repeats the call it already made instead
of answering; a reply whose calls all repeat answered calls (`repeats_answered_calls`) is asked again with
`ANSWER_NOTE` after the results (`with_answer_note`), so it answers from them. A new call stays allowed.

The grammars are in `ctxrag.models.llamacpp_grammars`, reading calls out of a reply in `ctxrag.models.tool_call_parsing`.

Example::

    from ctxrag.models.llamacpp_tools import ToolRequest
    req = ToolRequest.from_kwargs({"tools": [{"type": "function", "function": {"name": "add", "parameters": {}}}],
                                   "tool_choice": "add"})
    req.forced_names                    # ['add']
    req.parse('{"name": "add", "arguments": {"a": 1}}')[1][0]["args"]   # {'a': 1}
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.tool import ToolCall

from ctxrag.models.llamacpp_grammars import call_or_prose_grammar, grammar, prose_grammar
from ctxrag.models.parsing import extract_json
from ctxrag.models.tool_call_parsing import calls_from, parse_free_reply

_FORCING = {"any", "required"}
ANSWER_KEY = "answer"
"""The field of the final answer in a constrained turn after tool results (`ToolRequest.after_results`)."""

TOOLS_SYSTEM = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{signatures}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    'XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
"""Appended to the system message when tools are bound (Qwen2.5's own chat-template wording)."""


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    params = tool["function"].get("parameters") or {}
    if not params.get("properties"):  # a tool without arguments: the empty object
        return {"type": "object", "properties": {}}
    return params


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return "".join(parts)


@dataclass
class ToolRequest:
    """What one call asks of the model: bound tools, which of them it must call, and/or a JSON schema to follow."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    """Bound tools in OpenAI format (``{"type": "function", "function": {...}}``)."""
    forced_names: list[str] = field(default_factory=list)
    """Tools of which the reply must call one (empty: not forced)."""
    json_schema: dict[str, Any] | None = None
    """Structured output: the schema the reply must follow (``{}`` for any JSON object)."""
    turn: str = "free"
    """How a turn with tools bound but not forced is constrained (`after`): ``"free"`` (not constrained),
    ``"decide"`` (before any result: one call as JSON, or ``{"answer": "..."}``), ``"results"`` (after tool results:
    one ``<tool_call>`` block, or an answer in prose that cannot imitate a call) or ``"answer"`` (prose only: the
    model repeated a call the results answer)."""

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> ToolRequest:
        """The request in a call's ``tools`` / ``tool_choice`` / ``response_format`` kwargs (as ``bind`` passes them).

        Raises ValueError naming the bad value for an unknown tool name or response format.
        """
        tools = list(kwargs.get("tools") or [])
        choice = kwargs.get("tool_choice")
        names = [t["function"]["name"] for t in tools]
        forced: list[str] = []
        if tools and choice not in (None, "auto", "none", False):
            if choice is True or (isinstance(choice, str) and choice in _FORCING):
                forced = names
            elif isinstance(choice, str):
                forced = [choice]
            elif isinstance(choice, dict):
                forced = [choice.get("function", {}).get("name") or choice.get("name")]
            else:
                raise ValueError(f"tool_choice={choice!r}: expected 'auto', 'any', 'required', 'none', a tool name or "
                                 "{'type': 'function', 'function': {'name': ...}}")
            unknown = [n for n in forced if n not in names]
            if unknown:
                raise ValueError(f"tool_choice={choice!r} names {unknown}, but the bound tools are {names}")
        if choice == "none" or choice is False:
            tools = []
        schema = _response_schema(kwargs.get("response_format"))
        return cls(tools=tools, forced_names=forced, json_schema=schema)

    def after(self, messages: Sequence[BaseMessage]) -> ToolRequest:
        """This request for a turn that follows ``messages``. With tools bound but not forced, the turn is
        constrained to a call or an answer: free text is where a small model describes the call in prose ("you can
        use search_kb with the query ...") instead of making it, or, after the results, writes it in another shape
        ("```json {...}```", ``<tools>...``) with prose around it. Before any result the choice is JSON
        (``"decide"``); after results the answer stays prose, which the model writes best (``"results"``)."""
        if not (self.tools and not self.forced_names and self.json_schema is None):
            return self
        last = next((m for m in reversed(messages) if not isinstance(m, SystemMessage)), None)
        return replace(self, turn="results" if isinstance(last, ToolMessage) else "decide")

    def answering(self) -> ToolRequest:
        """This request with an answer in prose as the only choice (after a repeated call)."""
        return replace(self, turn="answer")

    @property
    def constrained(self) -> bool:
        """Whether the reply is constrained by a grammar (a forced tool, structured output, a tool turn)."""
        return bool(self.forced_names) or self.json_schema is not None or self.turn != "free"

    def _call_schemas(self, names: Sequence[str]) -> list[dict[str, Any]]:
        by_name = {t["function"]["name"]: t for t in self.tools}
        return [
            {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": _parameters(by_name[name])},
                "required": ["name", "arguments"],
            }
            for name in names
        ]

    def grammar_schema(self) -> dict[str, Any] | None:
        """The JSON schema the reply is constrained to, or None for free text."""
        if self.forced_names:
            options = self._call_schemas(self.forced_names)
            return options[0] if len(options) == 1 else {"anyOf": options}
        if self.turn == "decide":
            answer = {"type": "object", "properties": {ANSWER_KEY: {"type": "string"}}, "required": [ANSWER_KEY]}
            return {"anyOf": [*self._call_schemas([t["function"]["name"] for t in self.tools]), answer]}
        return self.json_schema

    def grammar(self) -> Any:
        """The llama.cpp grammar of this turn, or None for free text."""
        if self.turn == "results":
            calls = self._call_schemas([t["function"]["name"] for t in self.tools])
            return call_or_prose_grammar(calls[0] if len(calls) == 1 else {"anyOf": calls})
        if self.turn == "answer":
            return prose_grammar()
        schema = self.grammar_schema()
        return None if schema is None else grammar(schema)

    def system_text(self) -> str | None:
        """The tool descriptions to append to the system message (None without tools)."""
        if not self.tools:
            return None
        signatures = "\n".join(json.dumps(t, ensure_ascii=False) for t in self.tools)
        return TOOLS_SYSTEM.format(signatures=signatures)

    def parse(self, text: str) -> tuple[str, list[ToolCall], list[dict[str, Any]]]:
        """``(content, tool_calls, invalid_tool_calls)`` of a reply made under this request."""
        if not self.tools:
            return text, [], []
        if self.forced_names:
            return "", *calls_from([text], self.tools)
        if self.turn == "decide":
            try:
                data = extract_json(text)
            except ValueError:
                data = None
            if isinstance(data, dict) and isinstance(data.get(ANSWER_KEY), str):
                return data[ANSWER_KEY].strip(), [], []
            return "", *calls_from([text], self.tools)
        return parse_free_reply(text, self.tools)


def _response_schema(response_format: Any) -> dict[str, Any] | None:
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ValueError(f"response_format={response_format!r}: expected a dict like {{'type': 'json_schema', ...}}")
    kind = response_format.get("type")
    if kind == "json_object":
        return dict(response_format.get("schema") or {})
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise ValueError(f"response_format={response_format!r}: json_schema.schema must be a JSON schema dict")
        return schema
    if kind == "text":
        return None
    raise ValueError(f"response_format type {kind!r}: expected 'json_schema', 'json_object' or 'text'")


# -------------------------------------------------------------------------------------- messages -> llama.cpp dicts


def _role(message: BaseMessage) -> str:
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, ChatMessage):
        return message.role
    raise ValueError(f"unsupported message type {type(message).__name__} for the local chat model")


def _assistant_text(message: AIMessage) -> str:
    text = _text_of(message.content)
    calls = [f'<tool_call>\n{json.dumps({"name": c["name"], "arguments": c["args"]}, ensure_ascii=False)}\n</tool_call>'
             for c in message.tool_calls]
    return "\n".join([text, *calls]).strip() if calls else text


def chat_dicts(messages: Sequence[BaseMessage], request: ToolRequest | None = None) -> list[dict[str, str]]:
    """llama.cpp chat messages for LangChain ``messages``: tool calls and tool results written in the
    ``<tool_call>`` / ``<tool_response>`` convention, the bound tools described in the system message."""
    out: list[dict[str, str]] = []
    for message in messages:
        role = _role(message)
        if isinstance(message, AIMessage):
            out.append({"role": role, "content": _assistant_text(message)})
        elif role == "tool":
            block = f"<tool_response>\n{_text_of(message.content)}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n{block}"}  # results of parallel calls
            else:
                out.append({"role": "user", "content": block})
        else:
            out.append({"role": role, "content": _text_of(message.content)})
    tools_text = request.system_text() if request is not None else None
    if tools_text:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{tools_text}"}
        else:
            out.insert(0, {"role": "system", "content": tools_text})
    return out


# -------------------------------------------------------------------------------------- tool round trips

ANSWER_NOTE = "Answer the question with the tool results above; do not call the tools again."
"""Written after the tool results when the model repeated a call they already answer."""


def _call_key(name: str, args: Any) -> str:
    return json.dumps([name, args], sort_keys=True, ensure_ascii=False)


def repeats_answered_calls(messages: Sequence[BaseMessage], calls: Sequence[ToolCall]) -> bool:
    """Whether every one of ``calls`` repeats a call in ``messages`` (same tool, same arguments) that a ToolMessage
    has already answered: a loop, not a need for more information.

    >>> done = [AIMessage("", tool_calls=[tool_call(name="add", args={"a": 1}, id="c1")]),
    ...         ToolMessage("2", tool_call_id="c1")]
    >>> repeats_answered_calls(done, [tool_call(name="add", args={"a": 1}, id="c2")])
    True
    >>> repeats_answered_calls(done, [tool_call(name="add", args={"a": 5}, id="c3")])
    False
    """
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    made = {_call_key(c["name"], c["args"]) for m in messages if isinstance(m, AIMessage)
            for c in m.tool_calls if c.get("id") in answered}
    return bool(calls) and all(_call_key(c["name"], c["args"]) in made for c in calls)


RESULTS_NOTE = ("The results above are from the tool. Answer the question {question} with them; if they do not "
                "answer it, call a tool again with a different query.")
"""Written after the tool results of a turn after results (`results_note`): a small model shown the results
otherwise repeats its call, explains how it would call the tool, or echoes the question instead of answering."""


def results_note(messages: Sequence[BaseMessage]) -> str:
    """`RESULTS_NOTE` with the user's last question restated in it (quoted), or without one when there is none.

    >>> results_note([HumanMessage("What is 17 + 25?")])[:64]
    'The results above are from the tool. Answer the question "What i'
    """
    asked = next((_text_of(m.content) for m in reversed(messages) if isinstance(m, HumanMessage)), "")
    return RESULTS_NOTE.format(question=json.dumps(asked.strip()[:500], ensure_ascii=False) if asked else "")


def with_answer_note(dicts: list[dict[str, str]], note: str = ANSWER_NOTE) -> list[dict[str, str]]:
    """``dicts`` (from `chat_dicts`) with ``note`` (default `ANSWER_NOTE`) after the last tool results."""
    for i in range(len(dicts) - 1, -1, -1):
        if dicts[i]["role"] == "user" and dicts[i]["content"].startswith("<tool_response>"):
            return [*dicts[:i], {"role": "user", "content": f"{dicts[i]['content']}\n{note}"}, *dicts[i + 1:]]
    return dicts


