"""The embedded chat model: a GGUF file run in-process by llama.cpp (llama-cpp-python), as a LangChain chat model.

One ``llama_cpp.Llama`` is loaded per (file, n_ctx) and shared by every ``LocalLlamaChatModel`` in the process,
because loading costs seconds and hundreds of MB. llama.cpp contexts are not thread-safe, so calls on one shared model
take turns behind a lock. Tool calls and structured output (``bind_tools``, ``with_structured_output``) are
grammar-constrained; what the model is made to write and how its reply is read live in `ctxrag.models.llamacpp_tools`.
(Over 400 lines: one class's generation, streaming and LangChain entry points.)

Example::

    from ctxrag.models.gguf import local_model_path
    from ctxrag.models.llamacpp import LocalLlamaChatModel
    llm = LocalLlamaChatModel(model_path=str(local_model_path()), max_tokens=16)   # the default 1.5B
    print(llm.invoke("Say hello in French.").content)
    # top-5 token alternatives in the OpenAI format, as ChatOpenAI returns them:
    print(llm.bind(logprobs=True, top_logprobs=5).invoke("Yes or no?").response_metadata["logprobs"])
    llm.with_structured_output(MyPydanticModel).invoke("...")             # grammar-constrained JSON
    llm.bind_tools([my_function], tool_choice="my_function").invoke("...").tool_calls
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.output_parsers import JsonOutputKeyToolsParser
from langchain_core.output_parsers.openai_tools import PydanticToolsParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import BaseModel, Field

from ctxrag.errors import ModelError
from ctxrag.models.llamacpp_tools import (
    ToolRequest,
    chat_dicts,
    repeats_answered_calls,
    results_note,
    with_answer_note,
)
from ctxrag.models.loop_guard import DEFAULT_LIMITS, LoopLimits, StreamingLoopGuard, find_loop, trim_loop
from ctxrag.models.structured import json_reply_parser, parsed_output
from ctxrag.models.tool_call_parsing import ArgumentsStream

LOOP_FINISH = "loop"
"""``finish_reason`` of a reply cut short by the loop guard (its repeating tail trimmed)."""


@dataclass
class _SharedLlama:
    llama: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    load_seconds: float = 0.0


PROMPT_BATCH = 64
"""llama.cpp's ``n_batch`` for the shared model. A prompt is read in batches of this many tokens, and a kept prompt
prefix is reused in whole batches only (`ctxrag.models.llamacpp_prefix`), so a call re-reads fewer than this many
tokens of what an earlier call left in the context (the ask chain's answer after its quote call). llama.cpp's
default is 512; a fresh prompt's logits are the same to the bit at either size (tests/models/test_llamacpp_prefix.py),
so replies do not change."""

_SHARED: dict[tuple[str, int], _SharedLlama] = {}
_SHARED_LOCK = threading.Lock()


def shared_llama(model_path: str | Path, n_ctx: int, n_threads: int | None = None) -> _SharedLlama:
    """The process-wide llama.cpp model for (file, n_ctx), loaded on first use."""
    path = Path(model_path).expanduser().resolve()
    key = (str(path), int(n_ctx))
    with _SHARED_LOCK:
        shared = _SHARED.get(key)
        if shared is not None:
            return shared
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ModelError(
                f"the local chat model needs llama-cpp-python ({exc}); install it with: pip install 'ctxrag[local]'"
            ) from exc
        if not path.is_file():
            raise ModelError(f"local chat model file {path} does not exist")
        import time

        start = time.perf_counter()
        # n_threads=None keeps llama.cpp's default (half the logical CPUs): on a busy laptop, threads that spin while
        # waiting for a core generate far slower than fewer threads.
        kwargs: dict[str, Any] = {"n_threads": n_threads} if n_threads else {}
        try:
            llama = Llama(model_path=str(path), n_ctx=int(n_ctx), n_batch=PROMPT_BATCH, verbose=False, **kwargs)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"llama.cpp could not load {path}: {exc}") from exc
        from ctxrag.models.llamacpp_prefix import reuse_whole_batches

        # a reply must not depend on what the context held before (the warm process keeps one for every command)
        shared = _SharedLlama(llama=reuse_whole_batches(llama), load_seconds=time.perf_counter() - start)
        _SHARED[key] = shared
        return shared


def _perf_counters(llama: Any) -> tuple[float, int, float, int] | None:
    """llama.cpp's cumulative performance counters of ``llama``'s context (prompt ms, prompt tokens, decode ms,
    decoded tokens); None where the context has none. Read, never reset: `_timings` takes the difference."""
    ctx = getattr(getattr(llama, "_ctx", None), "ctx", None)
    if ctx is None:
        return None
    import llama_cpp

    perf = llama_cpp.llama_perf_context(ctx)
    return float(perf.t_p_eval_ms), int(perf.n_p_eval), float(perf.t_eval_ms), int(perf.n_eval)


def _timings(llama: Any, before: tuple[float, int, float, int] | None) -> dict[str, float | int] | None:
    """Where one call's time went, from llama.cpp's counters since ``before`` (`_perf_counters`): the prompt tokens it
    evaluated (those not already in its context from the previous call) and their seconds, the tokens it decoded one
    by one and theirs. None where the context has no counters."""
    after = _perf_counters(llama)
    if after is None or before is None:
        return None
    return {"prompt_eval_tokens": after[1] - before[1], "prompt_eval_s": round((after[0] - before[0]) / 1000, 4),
            "decode_tokens": after[3] - before[3], "decode_s": round((after[2] - before[2]) / 1000, 4)}


def _usage(usage: dict[str, int] | None) -> UsageMetadata | None:
    if not usage:
        return None
    prompt = int(usage.get("prompt_tokens", 0))
    completion = int(usage.get("completion_tokens", 0))
    return UsageMetadata(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion)


class _LoopStop:
    """llama.cpp logits processor: detokenizes the tokens generated so far and, at a degenerate loop, leaves only the
    end-of-generation token possible, so generation stops there (``create_chat_completion`` has no stopping criteria)."""

    def __init__(self, llama: Any, limits: LoopLimits) -> None:
        self.llama = llama
        self.limits = limits
        self.seen: int | None = None
        self.buffer = b""
        self.fired = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        n = len(input_ids)
        if self.seen is None:  # first call: only the prompt has been evaluated
            self.seen = n
            return scores
        new = [int(t) for t in input_ids[self.seen : n]]
        self.seen = n
        if new:
            self.buffer += self.llama.detokenize(new)
        text = self.buffer[-4 * self.limits.window :].decode("utf-8", errors="ignore")
        if self.fired or find_loop(text, self.limits) is not None:
            self.fired = True
            eos = int(self.llama.token_eos())
            scores[:] = -float("inf")
            scores[eos] = 0.0
        return scores


class LocalLlamaChatModel(BaseChatModel):
    """A GGUF chat model run in-process by llama.cpp; temperature 0 is greedy and repeatable.

    Honours ``stop``, ``max_tokens``, ``temperature``, ``seed`` and ``repeat_penalty`` (as fields or ``.bind(...)``
    kwargs), streams token by token, and returns OpenAI-format token logprobs with
    ``.bind(logprobs=True, top_logprobs=5)``. With ``loop_guard`` (default) a reply that falls into a degenerate loop
    (``[2][3] [2][3] ...``, a sentence over and over) stops there, its repeating tail trimmed to one copy, with
    ``finish_reason="loop"``; streaming shows the same text (see `ctxrag.models.loop_guard`).

    Example::

        llm = LocalLlamaChatModel(model_path="model.gguf", max_tokens=8)
        llm.invoke("2+2=").content
    """

    model_path: str
    n_ctx: int = 8192
    n_threads: int | None = None
    temperature: float = 0.0
    max_tokens: int = 512
    seed: int = 0
    stop: list[str] | None = None
    repeat_penalty: float = 1.1
    """llama.cpp's penalty on recently generated tokens (1.0 = off)."""
    loop_guard: bool = True
    loop_limits: LoopLimits = Field(default=DEFAULT_LIMITS)
    model_name: str = Field(default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    tool_turns: Literal["constrained", "free"] = "constrained"
    """With tools bound and not forced: ``"constrained"`` makes each turn a call or an answer (grammar; see
    `ctxrag.models.llamacpp_tools.ToolRequest.after`), ``"free"`` lets the model write anything and parses it."""

    @property
    def _llm_type(self) -> str:
        return "ctxrag-llamacpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "n_ctx": self.n_ctx, "temperature": self.temperature}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(ls_provider="llamacpp", ls_model_name=kwargs.get("model") or self.model_name,
                                 ls_model_type="chat", ls_temperature=kwargs.get("temperature", self.temperature),
                                 ls_max_tokens=kwargs.get("max_tokens", self.max_tokens))
        stop = stop if stop is not None else self.stop
        if stop:
            params["ls_stop"] = list(stop)
        return params

    def load(self) -> _SharedLlama:
        """Load (or reuse) the shared llama.cpp model now rather than at the first call."""
        return shared_llama(self.model_path, self.n_ctx, self.n_threads)

    def _params(self, stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "repeat_penalty": self.repeat_penalty,
            "stop": list(stop if stop is not None else (self.stop or [])),
        }
        for key in ("temperature", "max_tokens", "seed", "top_p", "top_k", "repeat_penalty"):
            if kwargs.get(key) is not None:
                params[key] = kwargs[key]
        return params

    def _prepare(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any], shared: _SharedLlama
    ) -> tuple[ToolRequest, list[dict[str, str]], dict[str, Any]]:
        """The call's tool request, llama.cpp messages and sampling parameters (a grammar when constrained)."""
        request = ToolRequest.from_kwargs(kwargs)
        if self.tool_turns == "constrained":
            request = request.after(messages)
        params = self._params(stop, kwargs)
        constraint = request.grammar()
        if constraint is not None:
            params["grammar"] = constraint
        elif self.loop_guard:  # a grammar already bounds the reply; the guard's forced EOS would fight it
            from llama_cpp import LogitsProcessorList

            params["logits_processor"] = LogitsProcessorList([_LoopStop(shared.llama, self.loop_limits)])
        dicts = chat_dicts(messages, request)
        if request.turn == "results":
            dicts = with_answer_note(dicts, results_note(messages))
        return request, dicts, params

    def _message(self, request: ToolRequest, text: str, metadata: dict[str, Any],
                 usage: UsageMetadata | None) -> AIMessage:
        content, calls, invalid = request.parse(text)
        if calls and metadata.get("finish_reason") == "stop":
            metadata = {**metadata, "finish_reason": "tool_calls"}
        return AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid, response_metadata=metadata,
                         usage_metadata=usage)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        shared = self.load()
        if kwargs.get("logprobs"):
            from ctxrag.models.llamacpp_logprobs import complete_with_logprobs

            dicts = chat_dicts(messages)
            params = self._params(stop, kwargs)
            top = int(kwargs.get("top_logprobs") or 0)
            request = ToolRequest.from_kwargs(kwargs)  # structured output keeps its grammar; tools are not offered
            constraint = request.grammar() if request.json_schema is not None and not request.tools else None
            with shared.lock:
                text, finish, usage, logprobs = complete_with_logprobs(shared.llama, dicts, top_logprobs=top,
                                                                       grammar=constraint, **params)
            if run_manager:
                run_manager.on_llm_new_token(text)
            metadata = {"finish_reason": finish, "model_name": self.model_name, "logprobs": logprobs}
            message = AIMessage(content=text, response_metadata=metadata, usage_metadata=_usage(usage))
            return ChatResult(generations=[ChatGeneration(message=message)])
        request, dicts, params = self._prepare(messages, stop, kwargs, shared)
        message = self._complete(shared, request, dicts, params)
        if request.tools and not request.forced_names and repeats_answered_calls(messages, message.tool_calls):
            # the results are in and it only repeats the calls they answer: ask for the answer, once
            if request.turn != "free":
                answering = request.answering()
                message = self._complete(shared, answering, with_answer_note(dicts),
                                         {**params, "grammar": answering.grammar()})
            else:
                message = self._complete(shared, request, with_answer_note(dicts),
                                         {**params, **_no_call_start(shared)})
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _complete(self, shared: _SharedLlama, request: ToolRequest, dicts: list[dict[str, str]],
                  params: dict[str, Any]) -> AIMessage:
        with shared.lock:
            before = _perf_counters(shared.llama)
            try:
                response = shared.llama.create_chat_completion(messages=dicts, **params)
            except ValueError as exc:  # e.g. the prompt exceeds n_ctx
                raise ModelError(f"local chat model {Path(self.model_path).name}: {exc}") from exc
            timings = _timings(shared.llama, before)
        choice = response["choices"][0]
        text = choice["message"].get("content") or ""
        finish = choice.get("finish_reason")
        if "logits_processor" in params:
            text, trimmed = trim_loop(text, self.loop_limits)
            finish = LOOP_FINISH if trimmed else finish
        metadata: dict[str, Any] = {"finish_reason": finish, "model_name": self.model_name}
        if timings is not None:
            metadata["timings"] = timings
        return self._message(request, text, metadata, _usage(response.get("usage")))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        request = ToolRequest.from_kwargs(kwargs)
        if kwargs.get("logprobs") or (request.tools and not request.forced_names):
            # logprobs come whole; a free reply with tools is parsed whole (a call may follow text): one chunk
            result = self._generate(messages, stop, run_manager, **kwargs)
            yield _whole_chunk(result.generations[0].message)
            return
        shared = self.load()
        request, dicts, params = self._prepare(messages, stop, kwargs, shared)
        guard = StreamingLoopGuard(self.loop_limits) if "logits_processor" in params else None
        calls = ArgumentsStream() if request.forced_names else None
        generated = 0

        def emit(delta: str, finish: str | None) -> ChatGenerationChunk:
            metadata: dict[str, Any] = {"finish_reason": finish, "model_name": self.model_name} if finish else {}
            usage = None
            if finish:
                usage = self._stream_usage(shared, dicts, generated)
                timings = _timings(shared.llama, before)
                if timings is not None:
                    metadata["timings"] = timings
            if calls is not None:
                pieces = calls.feed(delta) + (calls.finish() if finish else [])
                if finish == "stop" and calls.name is not None:
                    metadata["finish_reason"] = "tool_calls"
                message = AIMessageChunk(content="", tool_call_chunks=pieces, response_metadata=metadata,
                                         usage_metadata=usage, chunk_position="last" if finish else None)
            else:
                message = AIMessageChunk(content=delta, response_metadata=metadata, usage_metadata=usage,
                                         chunk_position="last" if finish else None)
            chunk = ChatGenerationChunk(message=message)
            if run_manager and delta:
                run_manager.on_llm_new_token(delta, chunk=chunk)
            return chunk

        # hold the lock for the whole stream: the shared context can serve one generation at a time
        with shared.lock:
            before = _perf_counters(shared.llama)
            try:
                stream = shared.llama.create_chat_completion(messages=dicts, stream=True, **params)
                try:
                    for part in stream:
                        choice = part["choices"][0]
                        delta = choice.get("delta", {}).get("content") or ""
                        finish = choice.get("finish_reason")
                        generated += bool(delta)
                        if guard is not None:
                            delta = guard.feed(delta)
                            if guard.stopped:  # closing the generator stops llama.cpp generating
                                yield emit(delta, LOOP_FINISH)
                                break
                            if finish:
                                delta += guard.flush()
                        if not delta and not finish:
                            continue
                        yield emit(delta, finish)
                    else:
                        rest = guard.flush() if guard is not None else ""
                        if rest:  # the stream ended without a finish chunk
                            yield emit(rest, None)
                finally:
                    close = getattr(stream, "close", None)
                    if close is not None:
                        close()
            except ValueError as exc:
                raise ModelError(f"local chat model {Path(self.model_path).name}: {exc}") from exc

    @staticmethod
    def _stream_usage(shared: _SharedLlama, dicts: list[dict[str, str]], generated: int) -> UsageMetadata | None:
        """Token counts of a streamed reply (llama.cpp streams none): the prompt re-tokenized through the model's chat
        template, and one completion token per streamed piece."""
        prompt = _prompt_tokens(shared.llama, dicts)
        if prompt is None:
            return None
        return UsageMetadata(input_tokens=prompt, output_tokens=generated, total_tokens=prompt + generated)

    # -- tools and structured output ---------------------------------------------------------------------------
    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable | BaseTool],
        *,
        tool_choice: dict | str | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (anything ``convert_to_openai_tool`` takes). ``tool_choice``: ``"auto"``/None (the model may
        call them; its reply is parsed), ``"any"``/``"required"``/True (it must call one), a tool name or
        ``{"type": "function", "function": {"name": ...}}`` (it must call that one; grammar-constrained), ``"none"``.

        Raises ValueError when ``tool_choice`` names a tool that is not bound.
        """
        formatted = [convert_to_openai_tool(t) for t in tools]
        ToolRequest.from_kwargs({"tools": formatted, "tool_choice": tool_choice})  # fail now on a bad choice
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return super().bind(tools=formatted, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        include_raw: bool = False,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict | BaseModel]:
        """A runnable whose output follows ``schema`` (a Pydantic class, a TypedDict or a JSON schema dict).

        ``method="json_schema"`` (default) constrains the reply to the schema with a llama.cpp grammar;
        ``"function_calling"`` forces a call of a tool made from the schema (also grammar-constrained);
        ``"json_mode"`` constrains it to any JSON object (say the fields in the prompt). Pydantic classes come back
        validated as instances, the others as dicts. ``include_raw=True`` returns ``{"raw", "parsed",
        "parsing_error"}`` and never raises on a bad reply.
        """
        if kwargs:
            raise ValueError(f"with_structured_output: unsupported argument(s) {sorted(kwargs)}")
        is_pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)
        traced = {"kwargs": {"method": method, "strict": strict}, "schema": convert_to_json_schema(schema)}
        parser: Runnable
        if method == "function_calling":
            tool = convert_to_openai_tool(schema)
            name = tool["function"]["name"]
            llm = self.bind_tools([tool], tool_choice=name, ls_structured_output_format=traced)
            parser = (PydanticToolsParser(tools=[schema], first_tool_only=True) if is_pydantic
                      else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True))
        elif method == "json_schema":
            json_schema = traced["schema"]
            name = json_schema.get("title", "output")
            llm = self.bind(
                response_format={"type": "json_schema", "json_schema": {"name": name, "schema": json_schema}},
                ls_structured_output_format=traced,
            )
            parser = json_reply_parser(schema)
        elif method == "json_mode":
            llm = self.bind(response_format={"type": "json_object"}, ls_structured_output_format=traced)
            parser = json_reply_parser(schema)
        else:
            raise ValueError(f"method={method!r}: expected 'json_schema', 'function_calling' or 'json_mode'")
        return parsed_output(llm, parser, include_raw=include_raw)


def _no_call_start(shared: _SharedLlama) -> dict[str, Any]:
    """``logit_bias`` that keeps the model from opening a ``<tool_call>`` block, where the tokenizer has it as one
    special token (Qwen2.5 does); nothing otherwise."""
    ids = shared.llama.tokenize(b"<tool_call>", add_bos=False, special=True)
    return {"logit_bias": {ids[0]: -100.0}} if len(ids) == 1 else {}


def _whole_chunk(message: BaseMessage) -> ChatGenerationChunk:
    assert isinstance(message, AIMessage)
    pieces = [
        {"name": c["name"], "args": json.dumps(c["args"], ensure_ascii=False), "id": c["id"], "index": i,
         "type": "tool_call_chunk"}
        for i, c in enumerate(message.tool_calls)
    ]
    return ChatGenerationChunk(message=AIMessageChunk(
        content=message.content, tool_call_chunks=pieces, response_metadata=message.response_metadata,
        usage_metadata=message.usage_metadata, chunk_position="last"))


_FORMATTERS: dict[int, Any] = {}


def _prompt_tokens(llama: Any, dicts: list[dict[str, str]]) -> int | None:
    """Tokens of the prompt llama.cpp builds for ``dicts`` with the GGUF's chat template (None without one)."""
    formatter = _FORMATTERS.get(id(llama))
    if formatter is None:
        template = (getattr(llama, "metadata", None) or {}).get("tokenizer.chat_template")
        if not template:
            return None
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        vocab = llama._model  # noqa: SLF001 - the bos/eos texts are only reachable through the model
        eos = vocab.token_get_text(llama.token_eos()) if llama.token_eos() >= 0 else ""
        bos = vocab.token_get_text(llama.token_bos()) if llama.token_bos() >= 0 else ""
        formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        _FORMATTERS[id(llama)] = formatter
    prompt = formatter(messages=dicts).prompt
    return len(llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True))


def loaded_models() -> Sequence[tuple[str, int]]:
    """(file, n_ctx) of every llama.cpp model loaded in this process."""
    return list(_SHARED)
