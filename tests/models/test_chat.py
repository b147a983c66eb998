from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from ctxrag.errors import ConfigError, ModelError
from ctxrag.models import make_chat_model
from ctxrag.models.chat import NO_KEY, describe_endpoint, ping_chat_model, wrap_model_errors
from ctxrag.models.llamacpp import LocalLlamaChatModel, loaded_models
from ctxrag.settings import get_settings
from ctxrag.testing.llm_server import SERVER_MODEL_ALIAS, CountingProxy, free_port

SECRET = "sk-test-0123456789-secret"

# ------------------------------------------------------------------------------------ settings -> model


def test_openai_provider_builds_chat_openai_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXRAG_LLM__PROVIDER", "openai")
    monkeypatch.setenv("CTXRAG_LLM__BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("CTXRAG_LLM__API_KEY", SECRET)
    monkeypatch.setenv("CTXRAG_LLM__MAX_TOKENS", "77")
    get_settings.cache_clear()
    model = make_chat_model()
    assert isinstance(model, ChatOpenAI)
    assert model.openai_api_base == "http://127.0.0.1:9/v1"
    assert model.openai_api_key.get_secret_value() == SECRET
    assert (model.max_tokens, model.temperature, model.max_retries, model.request_timeout) == (77, 0.0, 2, 120.0)
    assert SECRET not in repr(model)


def test_overrides_replace_single_fields_and_a_placeholder_key_is_used() -> None:
    model = make_chat_model(provider="openai", base_url="http://127.0.0.1:9/v1", model="m", max_tokens=5, timeout=3)
    assert isinstance(model, ChatOpenAI)
    assert model.openai_api_key.get_secret_value() == NO_KEY
    assert (model.model_name, model.max_tokens, model.request_timeout) == ("m", 5, 3.0)


def test_unknown_override_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown option.*'temprature'"):
        make_chat_model(provider="openai", base_url="http://x/v1", temprature=0.5)


def test_bad_override_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="provider"):
        make_chat_model(provider="claude")


def test_openai_provider_without_url_or_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="llm.base_url"):
        make_chat_model(provider="openai")


def test_provider_none_raises_model_error() -> None:
    with pytest.raises(ModelError, match="no LLM is configured"):
        make_chat_model(provider="none")


def test_local_provider_with_missing_model_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="nope.gguf"):
        make_chat_model(provider="local", model_path=tmp_path / "nope.gguf")


# ------------------------------------------------------------------------------------ broken endpoints


def test_endpoint_down_is_a_model_error_naming_the_url_not_the_key() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    model = make_chat_model(provider="openai", base_url=url, api_key=SECRET, max_retries=0, timeout=5)
    start = time.monotonic()
    with pytest.raises(ModelError) as info:
        ping_chat_model(model)
    assert time.monotonic() - start < 5
    message = str(info.value)
    assert f"chat endpoint {url} is unreachable" in message
    assert SECRET not in message and SECRET not in repr(info.value)


def test_wrap_model_errors_on_invoke_and_through_bind() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = make_chat_model(provider="openai", base_url=url, api_key=SECRET, max_retries=0)
    bound = model.bind(logprobs=True)
    with pytest.raises(ModelError, match=f"chat endpoint {url} is unreachable"):
        with wrap_model_errors(bound):
            bound.invoke("hi")


def test_wrap_model_errors_leaves_programming_errors_alone() -> None:
    with pytest.raises(KeyError):
        with wrap_model_errors("chat endpoint http://x/v1"):
            raise KeyError("a bug, not the endpoint")


class _GarbageHandler(BaseHTTPRequestHandler):
    replies: dict[str, tuple[int, str, bytes]] = {
        "/html/v1/chat/completions": (200, "text/html", b"<html>hello, I am not an API</html>"),
        "/error/v1/chat/completions": (500, "text/plain", b"internal server error"),
        "/empty/v1/chat/completions": (200, "application/json", b"{}"),
        "/truncated/v1/chat/completions": (200, "application/json", b'{"choices": [{"mess'),
        "/secret/v1/chat/completions": (401, "application/json", b'{"error": {"message": "bad key"}}'),
    }

    def log_message(self, *args: object) -> None:
        return

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, ctype, body = self.replies.get(self.path, (404, "text/plain", b"no"))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def garbage_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GarbageHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("kind", "verdict"),
    [("html", "answered"), ("error", "answered with an error"), ("empty", "answered garbage"),
     ("truncated", "answered"), ("secret", "refused the API key")],
)  # fmt: skip
def test_endpoint_answering_garbage_is_a_model_error(garbage_server: str, kind: str, verdict: str) -> None:
    url = f"{garbage_server}/{kind}/v1"
    model = make_chat_model(provider="openai", base_url=url, api_key=SECRET, max_retries=0, timeout=5)
    with pytest.raises(ModelError) as info:
        ping_chat_model(model)
    message = str(info.value)
    assert message.startswith(f"chat endpoint {url} {verdict}")
    assert SECRET not in message


def test_wrap_model_errors_catches_unparsable_replies_without_garbage_flag(garbage_server: str) -> None:
    url = f"{garbage_server}/html/v1"
    model = make_chat_model(provider="openai", base_url=url, max_retries=0)
    with pytest.raises(ModelError, match=f"chat endpoint {url} answered garbage"):
        with wrap_model_errors(model):
            model.invoke("hi")


def test_describe_endpoint() -> None:
    model = ChatOpenAI(base_url="http://h:1/v1", api_key=SecretStr(SECRET), model="m")
    assert describe_endpoint(model) == "chat endpoint http://h:1/v1"
    assert describe_endpoint(model.bind(stop=["x"])) == "chat endpoint http://h:1/v1"
    local = LocalLlamaChatModel(model_path="/m/x.gguf")
    assert describe_endpoint(local) == "local chat model /m/x.gguf"


# ------------------------------------------------------------------------------------ the real local model

PROMPT = [SystemMessage("You are terse."), HumanMessage("What is the capital of France? Answer with one word.")]
COUNT = "Count from 1 to 10, separated by commas, digits only."


@pytest.mark.llm
def test_local_model_answers_a_tiny_prompt(small_chat_model: LocalLlamaChatModel) -> None:
    reply = small_chat_model.invoke(PROMPT, max_tokens=16)
    assert "paris" in reply.content.lower()
    assert reply.usage_metadata["output_tokens"] <= 16
    assert reply.response_metadata["finish_reason"] in {"stop", "length"}


@pytest.mark.llm
def test_local_model_is_deterministic_and_honours_max_tokens(small_chat_model: LocalLlamaChatModel) -> None:
    prompt = "Write a long story about a dragon."
    first = small_chat_model.invoke(prompt, max_tokens=8)
    second = small_chat_model.invoke(prompt, max_tokens=8)
    assert first.content == second.content
    assert first.usage_metadata["output_tokens"] == 8
    assert first.response_metadata["finish_reason"] == "length"


@pytest.mark.llm
def test_local_model_honours_stop(small_chat_model: LocalLlamaChatModel) -> None:
    prompt = COUNT
    full = small_chat_model.invoke(prompt, max_tokens=40).content
    assert "5" in full
    stopped = small_chat_model.invoke(prompt, max_tokens=40, stop=["5"]).content
    assert "5" not in stopped and full.startswith(stopped)


@pytest.mark.llm
def test_local_model_streams(small_chat_model: LocalLlamaChatModel) -> None:
    chunks = list(small_chat_model.stream(COUNT, max_tokens=12))
    assert len([c for c in chunks if c.content]) >= 4 and all(isinstance(c, AIMessageChunk) for c in chunks)
    streamed = "".join(c.content for c in chunks)
    assert streamed.replace(" ", "").startswith("1,2,3")
    assert streamed == small_chat_model.invoke(COUNT, max_tokens=12).content


@pytest.mark.llm
def test_local_model_async(small_chat_model: LocalLlamaChatModel) -> None:
    async def both() -> list:
        # two concurrent calls on the one shared model take turns behind its lock
        return await asyncio.gather(
            small_chat_model.ainvoke(PROMPT, max_tokens=16), small_chat_model.ainvoke(PROMPT, max_tokens=16)
        )

    first, second = asyncio.run(both())
    assert "paris" in first.content.lower() and first.content == second.content


@pytest.mark.llm
def test_local_model_logprobs_in_openai_format(small_chat_model: LocalLlamaChatModel) -> None:
    plain = small_chat_model.invoke(PROMPT, max_tokens=8)
    reply = small_chat_model.bind(logprobs=True, top_logprobs=5).invoke(PROMPT, max_tokens=8)
    assert reply.content == plain.content  # same greedy path as create_chat_completion
    content = reply.response_metadata["logprobs"]["content"]
    assert content and "".join(e["token"] for e in content).strip().startswith(reply.content.strip()[:3])
    for entry in content:
        assert entry["logprob"] <= 0.0
        assert len(entry["top_logprobs"]) == 5
        # greedy: the chosen token is the most likely one
        assert entry["top_logprobs"][0]["token"] == entry["token"]
        assert entry["top_logprobs"][0]["logprob"] == pytest.approx(entry["logprob"])
        assert [t["logprob"] for t in entry["top_logprobs"]] == sorted((t["logprob"] for t in entry["top_logprobs"]), reverse=True)


@pytest.mark.llm
def test_local_model_logprobs_keep_the_structured_output_grammar(small_chat_model: LocalLlamaChatModel) -> None:
    # the evidence check reads the model's doubt about a structured reply: logprobs must not drop the grammar
    schema = {"type": "object", "properties": {"source": {"type": "integer", "minimum": 0, "maximum": 9},
                                               "city": {"type": "string", "maxLength": 20}},
              "required": ["source", "city"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "Pick", "schema": schema}}
    ask = "Sources: [1] Berlin is in Germany. [2] Paris is the capital of France. Which source names the capital of France?"
    plain = small_chat_model.bind(response_format=fmt).invoke(ask, max_tokens=48)
    reply = small_chat_model.bind(response_format=fmt, logprobs=True, top_logprobs=5).invoke(ask, max_tokens=48)
    assert reply.content == plain.content  # the same grammar-constrained greedy path
    data = json.loads(reply.content)
    assert set(data) == {"source", "city"} and 0 <= data["source"] <= 9 and len(data["city"]) <= 20
    content = reply.response_metadata["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == reply.content
    digit = next(e for e in content if e["token"].strip().isdigit())
    assert any(t["token"].strip().isdigit() and t["token"] != digit["token"] for t in digit["top_logprobs"])


@pytest.mark.llm
def test_model_is_loaded_once_per_process(small_chat_model: LocalLlamaChatModel, small_model_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXRAG_LLM__MODEL_PATH", str(small_model_path))  # conftest set n_ctx 4096, as the fixture's
    get_settings.cache_clear()
    again = make_chat_model(max_tokens=4)
    assert isinstance(again, LocalLlamaChatModel)
    assert again.load() is small_chat_model.load()
    assert sum(1 for path, n_ctx in loaded_models() if n_ctx == 4096 and path == str(small_model_path.resolve())) == 1


# ------------------------------------------------------------------------------------ the real server


LIVE = {"Cache-Control": "no-cache"}
"""Headers of a request the run's reply cache passes through to the server (`ctxrag.testing.reply_cache`)."""


def _remote(url: str, **kw: object) -> ChatOpenAI:
    return make_chat_model(provider="openai", base_url=url, model=SERVER_MODEL_ALIAS, max_retries=0, **kw)


@pytest.mark.llm
def test_server_answers_through_chat_openai(llama_server_url: str,
                                            recorded_local_reply: Callable[[list, int], str]) -> None:
    model = _remote(llama_server_url, max_tokens=16)
    reply = model.invoke(PROMPT, extra_headers=LIVE)  # decoded by the server now, not replayed
    assert "paris" in reply.content.lower()
    # the same greedy model in-process says the same thing: the server's GGUF, so the 1.5B in-process, its reply
    # recorded (decoded here, loading the 1.5B in this process, only when tests/llm_replies lacks it)
    assert reply.content == recorded_local_reply(PROMPT, 16)


@pytest.mark.llm
def test_server_streams_through_chat_openai(llama_server_url: str) -> None:
    chunks = list(_remote(llama_server_url, max_tokens=12).stream(COUNT))
    assert len([c for c in chunks if c.content]) >= 4  # token by token, not one blob
    assert "".join(c.content for c in chunks).replace(" ", "").startswith("1,2,3")


@pytest.mark.llm
def test_server_returns_logprobs(llama_server_url: str) -> None:
    reply = _remote(llama_server_url, max_tokens=4).bind(logprobs=True, top_logprobs=5).invoke(PROMPT)
    content = reply.response_metadata["logprobs"]["content"]
    assert content and len(content[0]["top_logprobs"]) == 5
    assert all(e["logprob"] <= 0.0 for e in content)


@pytest.mark.llm
def test_counting_proxy_counts_chat_completions(counting_llm_url) -> None:  # noqa: ANN001
    assert counting_llm_url.count == 0
    model = _remote(counting_llm_url, max_tokens=4)
    model.invoke("hi")
    list(model.stream("hello"))
    assert counting_llm_url.count == 2
    assert counting_llm_url.requests[0]["messages"][0]["content"] == "hi"
    counting_llm_url.reset()
    assert counting_llm_url.count == 0


@pytest.mark.llm
def test_settings_driven_model_reaches_the_counting_endpoint(llm_endpoint_env) -> None:  # noqa: ANN001
    model = make_chat_model(max_tokens=4)
    assert isinstance(model, ChatOpenAI)
    ping_chat_model(model)
    assert llm_endpoint_env.count == 1


def test_counting_proxy_reports_a_dead_upstream_as_502() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with CountingProxy(url) as proxy:
        with pytest.raises(ModelError, match="answered with an error"):
            ping_chat_model(_remote(proxy.url, max_tokens=4))
        assert proxy.count == 1


def test_local_provider_builds_the_selected_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ctxrag.models.gguf as gguf

    asked: list[str] = []

    def fake_path(settings, *, spec=None, **_kw):  # noqa: ANN001, ANN202 - stands in for the 1.1 GB assembly
        asked.append(gguf.model_spec(spec).key)
        path = tmp_path / gguf.model_spec(spec).filename
        path.write_bytes(b"GGUF")
        return path

    monkeypatch.setattr(gguf, "local_model_path", fake_path)
    default = make_chat_model()
    assert isinstance(default, LocalLlamaChatModel) and asked == ["1.5b"]
    assert default.model_name == "qwen2.5-coder-1.5b-instruct-q4_k_m" and default.repeat_penalty == 1.1
    assert default.loop_guard
    small = make_chat_model(local_model="0.5b", repeat_penalty=1.0)
    assert asked == ["1.5b", "0.5b"] and small.model_name == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    assert Path(small.model_path).name == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" and small.repeat_penalty == 1.0
    with pytest.raises(ConfigError, match="local_model"):
        make_chat_model(local_model="7b")
