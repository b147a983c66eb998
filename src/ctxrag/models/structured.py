"""Structured replies from any chat model: ``with_structured_output`` where the model has it, the reply's text
otherwise, so callers parse free text only as a fallback.

The local GGUF model constrains its reply to the schema with a llama.cpp grammar; ``ChatOpenAI`` sends the schema as
``response_format``. A model without ``with_structured_output`` (``NotImplementedError``), an endpoint that ignores
the schema, or one that refuses the request (it is then asked again without the schema) still answers: its raw text
comes back in `StructuredReply.text` with ``parsed=None``, and the caller's old text parser gets it.

Example::

    from pydantic import BaseModel
    from ctxrag.models.chat import make_chat_model
    from ctxrag.models.structured import structured_reply

    class Verdict(BaseModel):
        relevant: bool

    reply = structured_reply(make_chat_model(), Verdict, "Is Paris in France? Answer as JSON.", max_tokens=16)
    reply.parsed          # Verdict(relevant=True), or None when the model could not give one
    reply.text            # the raw reply text
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableConfig,
    RunnableLambda,
    RunnableMap,
    RunnablePassthrough,
)
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import BaseModel


@dataclass
class StructuredReply:
    """One reply: the schema instance (None when the model gave none that validates) and the raw text."""

    parsed: BaseModel | None
    text: str
    error: str | None = None
    """Why ``parsed`` is None (a parsing error, or that the model has no structured output)."""


def reply_text(message: Any) -> str:
    """The text of a chat reply (content blocks joined)."""
    content = getattr(message, "content", message)
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def with_max_tokens(llm: Any, max_tokens: int | None) -> Any:
    """A copy of ``llm`` with ``max_tokens`` set (a model field, so it survives ``with_structured_output``).

    A ``model.bind(max_tokens=..., temperature=...)`` becomes a copy of the model with those fields set, because
    ``with_structured_output`` on a binding would drop what it binds.
    """
    if isinstance(llm, RunnableBinding) and isinstance(llm.bound, BaseChatModel):
        fields = type(llm.bound).model_fields
        bound = {k: v for k, v in llm.kwargs.items() if k in fields}
        if bound and len(bound) == len(llm.kwargs):
            llm = llm.bound.model_copy(update=bound)
    if max_tokens is None:
        return llm
    if isinstance(llm, BaseChatModel) and "max_tokens" in type(llm).model_fields:
        return llm.model_copy(update={"max_tokens": max_tokens})
    return llm.bind(max_tokens=max_tokens)


def json_reply_parser(schema: Any) -> Runnable:
    """The parser of a JSON reply for ``schema``: a validated instance for a Pydantic class, a dict otherwise."""
    if isinstance(schema, type) and is_basemodel_subclass(schema):
        return PydanticOutputParser(pydantic_object=schema)
    return JsonOutputParser()


def parsed_output(llm: Runnable, parser: Runnable, *, include_raw: bool) -> Runnable:
    """``llm | parser``, or with ``include_raw`` ``{"raw", "parsed", "parsing_error"}`` that never raises on a reply
    the parser rejects (the shape ``with_structured_output(include_raw=True)`` returns)."""
    if not include_raw:
        return llm | parser
    parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
    failed = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=llm) | parsed.with_fallbacks([failed], exception_key="parsing_error")


def _from_raw(out: dict[str, Any]) -> StructuredReply:
    error = out.get("parsing_error")
    parsed = out.get("parsed")
    if error is not None:
        why: str | None = f"{type(error).__name__}: {error}"
    else:
        why = None if parsed is not None else "the reply holds no structured output"
    return StructuredReply(parsed=parsed, text=reply_text(out.get("raw")), error=why)


def _from_text(message: Any) -> StructuredReply:
    return StructuredReply(parsed=None, text=reply_text(message), error="structured output not used")


def structured_runnable(llm: Any, schema: type[BaseModel], *, max_tokens: int | None = None,
                        structured: bool = True) -> Runnable:
    """A runnable from chat-model input to `StructuredReply`: ``llm.with_structured_output(schema, include_raw=True)``
    when ``structured`` and the model has it, else the plain model (``parsed`` always None)."""
    model = with_max_tokens(llm, max_tokens)
    plain = model | RunnableLambda(_from_text)
    if structured:
        try:
            asking = model.with_structured_output(schema, include_raw=True) | RunnableLambda(_from_raw)
        except NotImplementedError:
            return plain
        # an endpoint that refuses the request (llama_cpp.server rejects response_format "json_schema" with 422
        # before generating anything) is asked again in plain text
        return asking.with_fallbacks([plain])
    return plain


def structured_reply(llm: Any, schema: type[BaseModel], messages: Any, *, config: RunnableConfig | None = None,
                     max_tokens: int | None = None, structured: bool = True) -> StructuredReply:
    """One call of `structured_runnable`."""
    return structured_runnable(llm, schema, max_tokens=max_tokens, structured=structured).invoke(messages, config)
