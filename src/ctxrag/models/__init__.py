"""Models: embeddings (`ctxrag.models.embeddings`), chat models (`ctxrag.models.chat`), the embedded GGUFs
(`ctxrag.models.gguf`) and the llama.cpp build check (`ctxrag.models.llama_build`).

``make_chat_model`` and ``local_model_path`` are imported on first use: the chat side loads LangChain's chat-model
stack, which opening a knowledge base or searching never needs.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxrag.models.chat import make_chat_model
    from ctxrag.models.gguf import local_model_path

_EXPORTS = {"make_chat_model": "ctxrag.models.chat", "local_model_path": "ctxrag.models.gguf"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxrag.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
