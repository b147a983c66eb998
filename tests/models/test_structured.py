from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from pydantic import BaseModel

from ctxrag.models.llamacpp import LocalLlamaChatModel
from ctxrag.models.structured import structured_reply, with_max_tokens
from ctxrag.testing.llm_server import SERVER_MODEL_ALIAS
from structured_fake import StructuredFake


class Verdict(BaseModel):
    relevant: bool


def test_model_with_structured_output_gives_the_instance() -> None:
    model = StructuredFake.of({"relevant": True})
    reply = structured_reply(model, Verdict, "Is Paris in France?")
    assert reply.parsed == Verdict(relevant=True) and reply.error is None
    assert model.schemas[0]["function"]["name"] == "Verdict"


def test_reply_that_does_not_validate_keeps_its_text() -> None:
    reply = structured_reply(StructuredFake.of("yes, it is"), Verdict, "Is Paris in France?")
    assert reply.parsed is None and reply.text == "yes, it is" and reply.error


def test_model_without_structured_output_answers_in_text() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("Yes.")]))
    reply = structured_reply(model, Verdict, "Is Paris in France?")
    assert (reply.parsed, reply.text, reply.error) == (None, "Yes.", "structured output not used")


def test_structured_false_never_asks_for_the_schema() -> None:
    model = StructuredFake.of("Yes.")
    reply = structured_reply(model, Verdict, "Is Paris in France?", structured=False)
    assert reply.parsed is None and reply.text == "Yes." and model.schemas == []


def test_with_max_tokens_sets_the_field_or_binds() -> None:
    local = LocalLlamaChatModel(model_path="not-loaded.gguf", max_tokens=512)
    assert with_max_tokens(local, 8).max_tokens == 8 and local.max_tokens == 512
    fake = GenericFakeChatModel(messages=iter([]))
    assert with_max_tokens(fake, 8).kwargs == {"max_tokens": 8}
    assert with_max_tokens(fake, None) is fake
    unbound = with_max_tokens(local.bind(max_tokens=200, temperature=0.5), None)
    assert isinstance(unbound, LocalLlamaChatModel) and (unbound.max_tokens, unbound.temperature) == (200, 0.5)


def test_a_refused_structured_request_is_asked_again_in_text() -> None:
    class Refusing(StructuredFake):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
            if kwargs.get("tools"):
                raise ValueError("422: response_format type 'json_schema' is not supported")
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

        def bind_tools(self, tools, *, tool_choice=None, **kwargs):  # noqa: ANN001, ANN003, ANN201
            super().bind_tools(tools)
            return self.bind(tools=tools, **kwargs)

    reply = structured_reply(Refusing.of("yes"), Verdict, "Is Paris in France?")
    assert reply.parsed is None and reply.text == "yes"


class _JsonObjectOnly(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that, like llama_cpp.server, refuses ``response_format`` type json_schema (422)
    and answers json_object; it keeps every request's ``response_format``."""

    seen: list[Any] = []

    def log_message(self, *args: object) -> None:
        return

    def do_POST(self) -> None:  # noqa: N802
        fmt = json.loads(self.rfile.read(int(self.headers["Content-Length"]))).get("response_format")
        self.seen.append(fmt)
        if fmt and fmt.get("type") == "json_schema":
            status, body = 422, {"detail": [{"loc": ["body", "response_format", "type"],
                                             "msg": "Input should be 'text' or 'json_object'"}]}
        else:
            message = {"role": "assistant", "content": '{"relevant": true}'}
            status, body = 200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                 "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def json_object_server() -> Iterator[str]:
    _JsonObjectOnly.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _JsonObjectOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_endpoint_refusing_json_schema_is_asked_for_json_object_with_the_schema(json_object_server: str) -> None:
    from ctxrag.models.chat import make_chat_model

    llm = make_chat_model(provider="openai", base_url=json_object_server, model="m", max_retries=0)
    assert llm.with_structured_output(Verdict).invoke("Is Paris in France?") == Verdict(relevant=True)
    refused, asked = _JsonObjectOnly.seen
    assert refused["type"] == "json_schema"
    assert asked["type"] == "json_object" and asked["schema"]["properties"] == {"relevant": {"type": "boolean"}}
    reply = structured_reply(llm, Verdict, "Is Paris in France?", max_tokens=8)
    assert (reply.parsed, reply.error) == (Verdict(relevant=True), None)
    assert [f["type"] for f in _JsonObjectOnly.seen[2:]] == ["json_object"]  # the refusal is remembered


async def test_endpoint_refusing_json_schema_async(json_object_server: str) -> None:
    from ctxrag.models.chat import make_chat_model

    llm = make_chat_model(provider="openai", base_url=json_object_server, model="m", max_retries=0)
    assert await llm.with_structured_output(Verdict).ainvoke("Is Paris in France?") == Verdict(relevant=True)


@pytest.mark.llm
def test_llama_cpp_server_through_chat_openai(llama_server_url: str) -> None:
    """The OpenAI-compatible route: llama_cpp.server refuses response_format json_schema and is asked for json_object
    with the schema, which it turns into a grammar: the reply is the schema's JSON without asking for it in words."""
    from ctxrag.models.chat import make_chat_model

    llm = make_chat_model(provider="openai", base_url=llama_server_url, model=SERVER_MODEL_ALIAS, max_retries=0,
                          max_tokens=24)
    reply = structured_reply(llm, Verdict, "Is Paris in France?")
    assert reply.error is None and reply.parsed == Verdict(relevant=True)
    raw = llm.with_structured_output(Verdict, include_raw=True).invoke("Is Paris in France?")
    assert raw["parsing_error"] is None and json.loads(raw["raw"].content) == {"relevant": True}
