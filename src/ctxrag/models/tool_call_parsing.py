"""Reading tool calls out of a small model's reply: every shape it writes a call in (``<tool_call>`` blocks, tags it
imitates, fenced or bare JSON, JSON inside prose) becomes ``ToolCall``s, the rest stays the content; a streamed forced
call becomes tool-call chunks (`ArgumentsStream`).

Example::

    from ctxrag.models.tool_call_parsing import parse_free_reply
    tools = [{"type": "function", "function": {"name": "search_kb", "parameters": {}}}]
    parse_free_reply('<tool_call>{"name": "search_kb", "arguments": {"q": "P1"}}</tool_call>', tools)[1][0]["args"]
"""
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages.tool import ToolCall, tool_call

from ctxrag.models.parsing import balanced_spans, extract_json

_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_IMITATED = re.compile(r"<(tools|function_call|tool)>\s*(.*?)\s*(?:</\1>|$)", re.DOTALL)
"""Tags a small model writes a call in by imitating the tool description (``<tools>{...}</tools>``)."""
_FENCED = re.compile(r"```[\w-]*\s*\n?(.*?)```", re.DOTALL)


def new_call_id() -> str:
    """An id for a tool call the model made (llama.cpp does not make one)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_free_reply(text: str, tools: list[dict[str, Any]]) -> tuple[str, list[ToolCall], list[dict[str, Any]]]:
    """``(content, tool_calls, invalid_tool_calls)`` of an unconstrained reply with ``tools`` bound, in every shape
    a small model writes a call: ``<tool_call>`` blocks (Qwen's own), blocks in tags it imitates from the tool
    description (``<tools>``, ``<function_call>``), fenced JSON anywhere in the reply (```` ```json {...}``` ````), a
    reply that is just the JSON, or JSON inside prose; each as ``{"name", "arguments"}`` (or ``"parameters"``) or OpenAI's
    ``{"type": "function", "function": {...}}``. The text around the calls stays the content. A fenced block that is
    not a call of a bound tool (code in an answer) stays text; an imitated tag block that is not one (the model
    echoing a signature) is an invalid call, so the turn is not mistaken for an answer.

    >>> tools = [{"type": "function", "function": {"name": "search_kb", "parameters": {}}}]
    >>> parse_free_reply('Let me look. ```json {"name": "search_kb", "arguments": {"q": "P1"}}```', tools)[1][0]["args"]
    {'q': 'P1'}
    """
    blocks = _CALL_BLOCK.findall(text)
    if blocks:
        content = _CALL_BLOCK.sub("", text).strip()
        return content, *calls_from(blocks, tools)
    imitated = [body for _, body in _IMITATED.findall(text)]
    if imitated:
        content = _IMITATED.sub("", text).strip()
        return content, *calls_from(imitated, tools)
    fenced = [(m, *calls_from([m.group(1)], tools)) for m in _FENCED.finditer(text)]
    calls = [c for _, found, _ in fenced for c in found]
    if calls:
        content = text
        for m, found, _ in fenced:
            if found:
                content = content.replace(m.group(0), "")
        return content.strip(), calls, []
    stripped = text.strip()
    if stripped.startswith("{"):  # a bare JSON call without the tags
        calls, invalid = calls_from([stripped], tools)
        if calls:
            return "", calls, invalid
    inline = [(span, calls_from([span], tools)[0]) for span in balanced_spans(text) if '"name"' in span]
    calls = [c for _, found in inline for c in found]
    if calls:  # a call written inside prose ("you can use it: {"name": ...}")
        content = text
        for span, found in inline:
            if found:
                content = content.replace(span, "")
        return content.strip(), calls, []
    return text, [], []


def calls_from(texts: Sequence[str], tools: list[dict[str, Any]]) -> tuple[list[ToolCall], list[dict[str, Any]]]:
    names = {t["function"]["name"] for t in tools}
    calls: list[ToolCall] = []
    invalid: list[dict[str, Any]] = []
    for raw in texts:
        try:
            data = extract_json(raw)
        except ValueError as exc:
            invalid.append({"type": "invalid_tool_call", "name": None, "args": raw, "id": new_call_id(),
                            "error": str(exc)})
            continue
        for item in data if isinstance(data, list) else [data]:
            if isinstance(item, dict) and isinstance(item.get("function"), dict):  # OpenAI's {"type", "function"}
                item = item["function"]
            name = item.get("name") if isinstance(item, dict) else None
            args = item.get("arguments", item.get("parameters", {})) if isinstance(item, dict) else None
            if isinstance(args, dict) and args.get("type") == "object" and "properties" in args:
                args = None  # a signature echoed back (a JSON schema), not a call
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    args = None
            if name not in names or not isinstance(args, dict):
                invalid.append({"type": "invalid_tool_call", "name": name if isinstance(name, str) else None,
                                "args": json.dumps(item, ensure_ascii=False), "id": new_call_id(),
                                "error": f"not a call of a bound tool {sorted(names)} with an arguments object"})
                continue
            calls.append(tool_call(name=name, args=args, id=new_call_id()))
    return calls, invalid


class ArgumentsStream:
    """Turns the streamed text of a forced call ``{"name": ..., "arguments": {...}}`` into tool-call chunks
    (``AIMessageChunk.tool_call_chunks``): the arguments text as it grows, the name once it is complete. Chunks of one
    call share index 0, so LangChain merges them into one call."""

    _NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
    _ARGS = re.compile(r'"arguments"\s*:\s*')

    def __init__(self) -> None:
        self.text = ""
        self.name: str | None = None
        self.id = new_call_id()
        self._args_start: int | None = None
        self._args_end: int | None = None
        self._sent = 0
        self._started = False

    def _chunk(self, name: str | None = None, args: str = "") -> dict[str, Any]:
        first = not self._started
        self._started = True
        return {"name": name, "args": args, "id": self.id if first else None, "index": 0, "type": "tool_call_chunk"}

    def feed(self, delta: str) -> list[dict[str, Any]]:
        """Tool-call chunks made available by ``delta``."""
        self.text += delta
        out: list[dict[str, Any]] = []
        if self._args_start is None:
            m = self._ARGS.search(self.text)
            if m is not None and m.end() < len(self.text):  # the value has begun (raw_decode skips no blanks)
                self._args_start = m.end()
        if self._args_start is not None and self._args_end is None:
            try:  # the arguments object is complete once it decodes
                _, end = json.JSONDecoder().raw_decode(self.text, self._args_start)
                self._args_end = end
            except ValueError:
                pass
            upto = self._args_end if self._args_end is not None else len(self.text)
            if upto > self._args_start + self._sent:
                out.append(self._chunk(args=self.text[self._args_start + self._sent : upto]))
                self._sent = upto - self._args_start
        if self.name is None:  # outside the arguments, which may have a "name" of their own
            if self._args_start is None:
                outside = self.text
            else:
                outside = self.text[: self._args_start] + (self.text[self._args_end :] if self._args_end else "")
            m = self._NAME.search(outside)
            if m is not None:
                self.name = json.loads(f'"{m.group(1)}"')
                out.append(self._chunk(name=self.name))
        return out

    def finish(self) -> list[dict[str, Any]]:
        """Whatever the stream left unsent (nothing when the call was complete)."""
        return self.feed("")
