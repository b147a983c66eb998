"""The embedded chat model: a GGUF file run in-process by llama.cpp (llama-cpp-python), as a LangChain chat model.

One ``llama_cpp.Llama`` is loaded per (file, n_ctx) and shared by every ``LocalLlamaChatModel`` in the process,
because loading costs seconds and hundreds of MB. llama.cpp contexts are not thread-safe, so calls on one shared model
take turns behind a lock.

Example::

    from ctxrag.models.gguf import local_model_path
    from ctxrag.models.llamacpp import LocalLlamaChatModel
    llm = LocalLlamaChatModel(model_path=str(local_model_path()), max_tokens=16)   # the default 1.5B
    print(llm.invoke("Say hello in French.").content)
    # top-5 token alternatives in the OpenAI format, as ChatOpenAI returns them:
    print(llm.bind(logprobs=True, top_logprobs=5).invoke("Yes or no?").response_metadata["logprobs"])
"""
from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import Field

from ctxrag.errors import ModelError
from ctxrag.models.loop_guard import DEFAULT_LIMITS, LoopLimits, StreamingLoopGuard, find_loop, trim_loop

LOOP_FINISH = "loop"
"""``finish_reason`` of a reply cut short by the loop guard (its repeating tail trimmed)."""


@dataclass
class _SharedLlama:
    llama: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    load_seconds: float = 0.0


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
            llama = Llama(model_path=str(path), n_ctx=int(n_ctx), verbose=False, **kwargs)
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(f"llama.cpp could not load {path}: {exc}") from exc
        shared = _SharedLlama(llama=llama, load_seconds=time.perf_counter() - start)
        _SHARED[key] = shared
        return shared


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


def _to_dict(message: BaseMessage) -> dict[str, str]:
    if isinstance(message, SystemMessage):
        role = "system"
    elif isinstance(message, HumanMessage):
        role = "user"
    elif isinstance(message, AIMessage):
        role = "assistant"
    elif isinstance(message, ToolMessage):
        role = "tool"
    elif isinstance(message, ChatMessage):
        role = message.role
    else:
        raise ValueError(f"unsupported message type {type(message).__name__} for the local chat model")
    return {"role": role, "content": _text_of(message.content)}


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

    @property
    def _llm_type(self) -> str:
        return "ctxrag-llamacpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "n_ctx": self.n_ctx, "temperature": self.temperature}

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

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        shared = self.load()
        dicts = [_to_dict(m) for m in messages]
        params = self._params(stop, kwargs)
        if kwargs.get("logprobs"):
            from ctxrag.models.llamacpp_logprobs import complete_with_logprobs

            top = int(kwargs.get("top_logprobs") or 0)
            with shared.lock:
                text, finish, usage, logprobs = complete_with_logprobs(shared.llama, dicts, top_logprobs=top, **params)
            if run_manager:
                run_manager.on_llm_new_token(text)
            metadata = {"finish_reason": finish, "model_name": self.model_name, "logprobs": logprobs}
            message = AIMessage(content=text, response_metadata=metadata, usage_metadata=_usage(usage))
            return ChatResult(generations=[ChatGeneration(message=message)])
        if self.loop_guard:
            from llama_cpp import LogitsProcessorList

            params["logits_processor"] = LogitsProcessorList([_LoopStop(shared.llama, self.loop_limits)])
        with shared.lock:
            try:
                response = shared.llama.create_chat_completion(messages=dicts, **params)
            except ValueError as exc:  # e.g. the prompt exceeds n_ctx
                raise ModelError(f"local chat model {Path(self.model_path).name}: {exc}") from exc
        choice = response["choices"][0]
        text = choice["message"].get("content") or ""
        finish = choice.get("finish_reason")
        if self.loop_guard:
            text, trimmed = trim_loop(text, self.loop_limits)
            finish = LOOP_FINISH if trimmed else finish
        metadata = {"finish_reason": finish, "model_name": self.model_name}
        message = AIMessage(content=text, response_metadata=metadata, usage_metadata=_usage(response.get("usage")))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        if kwargs.get("logprobs"):  # logprobs come whole; one chunk carries the full reply
            result = self._generate(messages, stop, run_manager, **kwargs)
            msg = result.generations[0].message
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content=msg.content, response_metadata=msg.response_metadata, usage_metadata=msg.usage_metadata
                )
            )
            return
        shared = self.load()
        dicts = [_to_dict(m) for m in messages]
        params = self._params(stop, kwargs)
        guard = StreamingLoopGuard(self.loop_limits) if self.loop_guard else None

        def emit(delta: str, finish: str | None) -> ChatGenerationChunk:
            metadata = {"finish_reason": finish, "model_name": self.model_name} if finish else {}
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=delta, response_metadata=metadata))
            if run_manager and delta:
                run_manager.on_llm_new_token(delta, chunk=chunk)
            return chunk

        # hold the lock for the whole stream: the shared context can serve one generation at a time
        with shared.lock:
            try:
                stream = shared.llama.create_chat_completion(messages=dicts, stream=True, **params)
                try:
                    for part in stream:
                        choice = part["choices"][0]
                        delta = choice.get("delta", {}).get("content") or ""
                        finish = choice.get("finish_reason")
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


def loaded_models() -> Sequence[tuple[str, int]]:
    """(file, n_ctx) of every llama.cpp model loaded in this process."""
    return list(_SHARED)
