"""llama.cpp grammars for the local chat model: a JSON schema's grammar (forced calls, structured output), prose that
cannot open a tag, JSON object or code fence, and "one call or prose" for a turn after tool results; each cached.

Example::

    from ctxrag.models.llamacpp_grammars import grammar
    g = grammar({"type": "object", "properties": {"answer": {"type": "string"}}})
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any

@functools.lru_cache(maxsize=64)
def _grammar_for(schema_json: str) -> Any:
    from llama_cpp import LlamaGrammar

    return LlamaGrammar.from_json_schema(schema_json, verbose=False)


_PROSE_RULES = (
    'root ::= "<tool_call>\\n" call "\\n</tool_call>" | ctxrag-prose\n'
    "ctxrag-prose ::= [^<{`\\x20\\n] ctxrag-more*\n"
    'ctxrag-more ::= [^<`] | "`" [^<`] | "``" [^<`]\n'
)


@functools.lru_cache(maxsize=64)
def _call_or_prose(schema_json: str) -> Any:
    from llama_cpp import LlamaGrammar
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    calls = re.sub(r"^root ::=", "call ::=", json_schema_to_gbnf(schema_json), flags=re.M)
    return LlamaGrammar.from_string(calls + "\n" + _PROSE_RULES, verbose=False)


@functools.lru_cache(maxsize=1)
def prose_grammar() -> Any:
    """An answer in prose that cannot open a tag, a JSON object or a code fence."""
    from llama_cpp import LlamaGrammar

    rules = _PROSE_RULES.split("\n", 1)[1]
    return LlamaGrammar.from_string("root ::= ctxrag-prose\n" + rules, verbose=False)


def call_or_prose_grammar(call_schema: dict[str, Any]) -> Any:
    """A grammar for a turn after tool results: one ``<tool_call>{...}</tool_call>`` matching ``call_schema``, or
    an answer in prose that cannot open a tag, a JSON object or a code fence (the shapes a small model imitates a
    call in). The answer stays free text, as the model writes best; cached per schema."""
    text = json.dumps(call_schema)
    try:
        return _call_or_prose(text)
    except Exception as exc:  # noqa: BLE001 - llama.cpp raises bare exceptions for unsupported schema features
        raise ValueError(f"llama.cpp cannot build a grammar for the tool calls {text[:300]}: {exc}") from exc


def grammar(schema: dict[str, Any]) -> Any:
    """The llama.cpp grammar for a JSON schema (``{}``: any JSON object); cached per schema.

    Raises ValueError naming the schema when llama.cpp cannot turn it into a grammar.
    """
    text = json.dumps(schema or {"type": "object"})  # key order kept: it is the order the reply is written in
    try:
        return _grammar_for(text)
    except Exception as exc:  # noqa: BLE001 - llama.cpp raises bare exceptions for unsupported schema features
        raise ValueError(f"llama.cpp cannot build a grammar for the JSON schema {text[:300]}: {exc}") from exc
