"""Chat models from settings: the embedded GGUF (in-process llama.cpp) or any OpenAI-compatible endpoint.

Example::

    from ctxrag.models.chat import make_chat_model, ping_chat_model, wrap_model_errors
    llm = make_chat_model(max_tokens=64)              # provider from settings (default: local)
    ping_chat_model(llm)                              # ModelError with the endpoint URL when it is down
    with wrap_model_errors(llm):                      # connection errors / garbage -> ModelError
        print(llm.invoke("What is RAG?").content)

    remote = make_chat_model(provider="openai", base_url="http://127.0.0.1:8000/v1", model="qwen2.5")
"""
from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from pydantic import SecretStr, ValidationError

from ctxrag.errors import ConfigError, CtxragError, ModelError
from ctxrag.redact import redact
from ctxrag.models import gguf
from ctxrag.settings import LLMSettings, Settings, get_settings

NO_KEY = "not-needed"
"""Placeholder API key: OpenAI clients insist on one, local servers ignore it."""


def _llm_settings(settings: Settings, overrides: dict[str, Any]) -> LLMSettings:
    base = settings.llm
    unknown = sorted(set(overrides) - set(LLMSettings.model_fields))
    if unknown:
        raise ConfigError(f"make_chat_model: unknown option(s) {unknown}; known: {sorted(LLMSettings.model_fields)}")
    try:
        return LLMSettings.model_validate({**dict(base), **overrides})
    except ValidationError as exc:
        raise ConfigError(f"make_chat_model: bad option: {exc}") from exc


def make_chat_model(settings: Settings | None = None, *, warm: bool = False, **overrides: Any) -> BaseChatModel:
    """The chat model that ``settings.llm`` describes; keyword ``overrides`` replace single ``llm`` fields.

    ``provider="local"``: the GGUF (``llm.model_path``, else the ``llm.local_model`` spec, default the 1.5B,
    assembled from its data wheels), loaded once per process; with ``warm=True`` (the CLI's answering commands) and
    ``llm.warm_idle_s`` > 0, loaded once in a background process that later commands reuse (`WarmChatModel`);
    ``"openai"``: ``ChatOpenAI`` on ``llm.base_url``; ``"none"``: raises ModelError (callers degrade).
    """
    settings = settings or get_settings()
    llm = _llm_settings(settings, overrides)
    if llm.provider == "none":
        raise ModelError("no LLM is configured (llm.provider='none'); set CTXRAG_LLM__PROVIDER=local or openai")
    if llm.provider == "openai":
        return _openai_chat_model(llm)
    if llm.provider == "local":
        from ctxrag.models.llamacpp import LocalLlamaChatModel  # needs the optional llama-cpp-python

        if llm.model_path is not None:
            path = Path(llm.model_path).expanduser()
            if not path.is_file():
                raise ModelError(f"llm.model_path={str(path)!r}: no such file")
            name = path.stem
        else:
            spec = gguf.model_spec(llm.local_model)
            path = gguf.local_model_path(settings, spec=spec)  # looked up per call: tests stand in a fake
            name = spec.name
        if warm and llm.warm_idle_s > 0:
            from ctxrag.models.warm import WarmChatModel

            return WarmChatModel(model_path=str(path), n_ctx=llm.n_ctx, n_threads=llm.n_threads,
                                 temperature=llm.temperature, max_tokens=llm.max_tokens,
                                 repeat_penalty=llm.repeat_penalty, model_name=name, idle_s=llm.warm_idle_s)
        return LocalLlamaChatModel(
            model_path=str(path),
            n_ctx=llm.n_ctx,
            n_threads=llm.n_threads,
            temperature=llm.temperature,
            max_tokens=llm.max_tokens,
            repeat_penalty=llm.repeat_penalty,
            model_name=name,
        )
    raise ConfigError(f"llm.provider={llm.provider!r}: expected one of 'local', 'openai', 'none'")


def prestart_chat_model(llm: BaseChatModel) -> None:
    """Begin loading a warm local model now, in the background (`ctxrag.models.warm.WarmChatModel.prestart`), so a
    command's first answer does not wait for the whole load; nothing for any other model.

    Example::

        llm = make_chat_model(warm=True)
        prestart_chat_model(llm)    # the CLI's answering commands call it before opening the knowledge base
    """
    prestart = getattr(llm, "prestart", None)
    if callable(prestart):
        prestart()


@functools.lru_cache(maxsize=1)
def _openai_compatible_class() -> type:
    from langchain_openai import ChatOpenAI

    class ChatOpenAICompatible(ChatOpenAI):
        """`ChatOpenAI` that speaks the dialect of self-hosted endpoints; api.openai.com gets the payload unchanged.

        - It also sends the legacy ``max_tokens``: langchain-openai renames it ``max_completion_tokens``, which
          llama_cpp.server (and some older vLLM/Ollama builds) ignore, so replies would not be length-limited.
        - ``with_structured_output`` (``method="json_schema"``, the default) asks for ``response_format`` type
          ``json_schema``; an endpoint that refuses that ``response_format`` (llama_cpp.server answers an error
          before generating) is asked with ``{"type": "json_object", "schema": ...}``, which llama_cpp.server turns
          into a grammar, so the reply follows the schema there too. The refusal is remembered per base URL for the
          process, so later calls go straight to the form the endpoint takes.
        """

        def _self_hosted(self) -> bool:
            base = self.openai_api_base or ""
            return bool(base) and "api.openai.com" not in base

        def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
            payload = super()._get_request_payload(input_, stop=stop, **kwargs)
            if self._self_hosted() and "max_completion_tokens" in payload:
                payload.setdefault("max_tokens", payload["max_completion_tokens"])
            return payload

        def with_structured_output(self, schema: Any = None, *, method: str = "json_schema",
                                   include_raw: bool = False, strict: bool | None = None, tools: list | None = None,
                                   **kwargs: Any) -> Any:
            asked = super().with_structured_output(schema, method=method, include_raw=include_raw, strict=strict,
                                                   tools=tools, **kwargs)
            if method != "json_schema" or schema is None or tools or kwargs or not self._self_hosted():
                return asked
            return _json_schema_then_json_object(asked, _json_object_with_schema(self, schema, include_raw),
                                                 str(self.openai_api_base))

    return ChatOpenAICompatible


_REFUSING_JSON_SCHEMA: set[str] = set()
"""Base URLs of endpoints that refused ``response_format`` type json_schema in this process."""


def _refused_response_format(exc: BaseException) -> bool:
    import openai

    return isinstance(exc, openai.APIStatusError) and "response_format" in f"{exc} {exc.body}"


def _json_schema_then_json_object(asked: Any, fallback: Any, base_url: str) -> Any:
    """``asked`` (json_schema), or ``fallback`` (json_object with the schema) once the endpoint refused the first."""
    from langchain_core.runnables import RunnableLambda

    def run(input_: Any, config: Any) -> Any:
        if base_url not in _REFUSING_JSON_SCHEMA:
            try:
                return asked.invoke(input_, config)
            except Exception as exc:
                if not _refused_response_format(exc):
                    raise
                _REFUSING_JSON_SCHEMA.add(base_url)
        return fallback.invoke(input_, config)

    async def arun(input_: Any, config: Any) -> Any:
        if base_url not in _REFUSING_JSON_SCHEMA:
            try:
                return await asked.ainvoke(input_, config)
            except Exception as exc:
                if not _refused_response_format(exc):
                    raise
                _REFUSING_JSON_SCHEMA.add(base_url)
        return await fallback.ainvoke(input_, config)

    return RunnableLambda(run, afunc=arun, name="structured_output")


def _json_object_with_schema(model: BaseChatModel, schema: Any, include_raw: bool) -> Any:
    """``with_structured_output`` through ``response_format={"type": "json_object", "schema": ...}``, the form
    llama_cpp.server constrains to the schema."""
    from langchain_core.utils.function_calling import convert_to_json_schema

    from ctxrag.models.structured import json_reply_parser, parsed_output

    json_schema = convert_to_json_schema(schema)
    llm = model.bind(response_format={"type": "json_object", "schema": json_schema},
                     ls_structured_output_format={"kwargs": {"method": "json_schema"}, "schema": json_schema})
    return parsed_output(llm, json_reply_parser(schema), include_raw=include_raw)


def chat_openai_compatible(**kwargs: Any) -> BaseChatModel:
    """A `ChatOpenAI` for any OpenAI-compatible endpoint (see `ChatOpenAICompatible`); same arguments as ChatOpenAI."""
    return _openai_compatible_class()(**kwargs)


def _openai_chat_model(llm: LLMSettings) -> BaseChatModel:
    ChatOpenAI = _openai_compatible_class()

    if not llm.base_url and llm.api_key is None:
        raise ConfigError(
            "llm.provider='openai' needs llm.base_url (e.g. CTXRAG_LLM__BASE_URL=http://127.0.0.1:8000/v1) "
            "or an api_key for api.openai.com"
        )
    key = llm.api_key if llm.api_key is not None else SecretStr(NO_KEY)
    return ChatOpenAI(
        base_url=llm.base_url,
        model=llm.model,
        api_key=key,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        timeout=llm.timeout,
        max_retries=llm.max_retries,
    )


def describe_endpoint(model: Any) -> str:
    """Where a chat model lives, for messages: the base URL, or the local GGUF file. Never the API key."""
    if isinstance(model, str):
        return model
    if model is None:
        return "the model endpoint"
    bound = getattr(model, "bound", None)  # RunnableBinding from .bind(...)
    if bound is not None and not isinstance(model, BaseChatModel):
        return describe_endpoint(bound)
    base = getattr(model, "openai_api_base", None)
    if base is not None or type(model).__name__ == "ChatOpenAI":
        return redact(f"chat endpoint {base or 'https://api.openai.com/v1'}")  # no user:password@ either
    path = getattr(model, "model_path", None)
    if path:
        return f"local chat model {path}"
    return f"chat model {type(model).__name__}"


_ENDPOINT_KINDS = (("/chat/completions", "chat endpoint"), ("/completions", "completions endpoint"),
                   ("/embeddings", "embeddings endpoint"), ("/rerank", "rerank endpoint"))


def _request_of(exc: BaseException) -> Any:
    """The HTTP request a client error carries (OpenAI's and httpx's errors do), or None."""
    try:
        return getattr(exc, "request", None)
    except RuntimeError:  # httpx raises it for an error made without a request
        return None


def _endpoint_of(exc: BaseException) -> str | None:
    """Which endpoint failed, from the request the error carries: ``embeddings endpoint http://h/v1`` for a POST
    to ``http://h/v1/embeddings``; None when the error carries no request (then the caller's model is named)."""
    url = getattr(_request_of(exc), "url", None)
    if url is None:
        return None
    text = str(url).split("?", 1)[0]
    for suffix, kind in _ENDPOINT_KINDS:
        if text.endswith(suffix):
            return redact(f"{kind} {text[: -len(suffix)]}")
    return redact(f"model endpoint {text}")


def _secrets_of(model: Any, exc: BaseException | None = None) -> list[str]:
    """The API keys `model` holds and the credential the failed request sent (whatever the model, an embeddings
    client's key is in the request's Authorization header)."""
    secrets = []
    headers = getattr(_request_of(exc), "headers", None) if exc is not None else None
    auth = headers.get("authorization", "") if headers is not None else ""
    credential = auth.split(" ", 1)[1].strip() if " " in auth else ""
    if credential and credential != NO_KEY and len(credential) >= 4:
        secrets.append(credential)
    for target in (model, getattr(model, "bound", None)):
        key = getattr(target, "openai_api_key", None)
        if isinstance(key, SecretStr):
            value = key.get_secret_value()
            if value and value != NO_KEY:
                secrets.append(value)
    return secrets


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return redact(text)


def _classify(exc: BaseException) -> str | None:
    """'unreachable' / 'answered garbage' for errors that mean the endpoint is down or broken; None for others."""
    import httpx

    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on it
        openai = None  # type: ignore[assignment]
    if openai is not None:
        if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
            return "is unreachable"
        if isinstance(exc, openai.AuthenticationError):
            return "refused the API key"
        if isinstance(exc, (openai.APIStatusError, openai.APIResponseValidationError)):
            return "answered with an error"
        if isinstance(exc, openai.APIError):
            return "answered garbage"
    if isinstance(exc, (httpx.ConnectError, httpx.TimeoutException, ConnectionError, TimeoutError)):
        return "is unreachable"
    if isinstance(exc, (httpx.HTTPError, json.JSONDecodeError)):
        return "answered garbage"
    return None


def _raised_by_client(exc: BaseException) -> bool:
    """True when the innermost frame is in the OpenAI client or its LangChain wrapper: a reply it could not parse."""
    tb = exc.__traceback__
    module = ""
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        tb = tb.tb_next
    return module.split(".")[0] in {"openai", "langchain_openai"}


@contextmanager
def wrap_model_errors(model: Any, *, garbage: bool = False) -> Iterator[None]:
    """Turn connection errors, timeouts, HTTP errors and non-JSON answers from ``model`` into ModelError.

    The message names the endpoint (URL or GGUF path) and never the API key. Errors raised inside the OpenAI client
    (a reply it cannot parse) count as garbage too; with ``garbage=True`` every other exception does as well.
    """
    try:
        yield
    except CtxragError:
        raise
    except Exception as exc:  # noqa: BLE001 - classified below, others re-raised
        verdict = _classify(exc)
        if verdict is None and not garbage and not _raised_by_client(exc):
            raise
        raise _model_error(exc, model, verdict) from exc


def ping_chat_model(model: BaseChatModel, *, max_tokens: int = 4) -> str:
    """Send a tiny prompt; return the reply text or raise ModelError naming the endpoint.

    Use it before a long job so a dead endpoint fails in a second instead of at the first chunk.
    """
    with wrap_model_errors(model, garbage=True):
        reply = model.bind(max_tokens=max_tokens).invoke("Reply with the single word: OK")
    content = getattr(reply, "content", None)
    if not isinstance(content, str):
        raise ModelError(f"{describe_endpoint(model)} answered garbage: a reply without text ({type(reply).__name__})")
    return content


check_chat_model = ping_chat_model


def as_model_error(exc: BaseException, model: Any) -> ModelError | None:
    """The `ModelError` that `wrap_model_errors(model)` would raise for `exc` (a dead, refusing or garbled endpoint),
    or None when `exc` is some other failure. For callers that see the error after the fact (the HTTP server)."""
    if isinstance(exc, ModelError):
        return exc
    if isinstance(exc, CtxragError):
        return None
    verdict = _classify(exc)
    if verdict is None and not _raised_by_client(exc):
        return None
    return _model_error(exc, model, verdict)


def _model_error(exc: BaseException, model: Any, verdict: str | None) -> ModelError:
    """One line naming the endpoint that failed (the request's, else `model`'s) and why; keys scrubbed."""
    where = _endpoint_of(exc) or describe_endpoint(model)
    detail = _scrub(f"{type(exc).__name__}: {exc}", _secrets_of(model, exc))
    return ModelError(f"{where} {verdict or 'answered garbage'}: {detail}")


def model_failure_types() -> tuple[type[Exception], ...]:
    """The exception classes a dead, refusing or garbled endpoint raises (what `as_model_error` maps), so a server
    can register one handler for them."""
    import httpx

    types: list[type[Exception]] = [httpx.HTTPError, ConnectionError, TimeoutError]
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on it
        return tuple(types)
    return (*types, openai.APIError)
