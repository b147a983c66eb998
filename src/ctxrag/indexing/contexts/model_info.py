"""What the contextualizer needs to know about a chat model without calling it: its name (cache key), window and
tokenizer."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxrag.models.gguf import model_name_for


def name_of(model: Any) -> str | None:
    """The model's name for the cache key; a GGUF's file name, not its path (moving $CTXRAG_HOME keeps the cache)."""
    model = getattr(model, "bound", model)  # RunnableBinding
    for attr in ("model_path", "model_name", "model"):  # a local GGUF's file says more than a fixed name
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return Path(value).name if attr == "model_path" else value
    return None


def n_ctx_of(model: Any) -> int | None:
    """The window of an in-process model that declares one (LocalLlamaChatModel.n_ctx)."""
    value = getattr(getattr(model, "bound", model), "n_ctx", None)
    return value if isinstance(value, int) and value > 0 else None


def default_model_name(settings: Any) -> str:
    """The name `make_chat_model(settings)` would give, without building the model (all-cached ingests load none)."""
    llm = settings.llm
    if llm.provider == "local":
        return model_name_for(settings)
    return str(llm.model)


def tokenizer_of(model: Any) -> Callable[[str], int] | None:
    """The in-process llama.cpp tokenizer when the model has one (exact and cheap); never tiktoken (offline)."""
    model = getattr(model, "bound", model)
    load = getattr(model, "load", None)
    if callable(load) and getattr(model, "model_path", None):  # ctxrag's LocalLlamaChatModel

        def count(text: str) -> int:
            shared = load()
            with shared.lock:  # one llama.cpp context, shared with generation
                return len(shared.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

        return count
    return None
