"""LangChain's standard chat-model suites (``langchain_tests``) for `LocalLlamaChatModel`.

The unit suite checks construction, ``bind_tools`` and ``with_structured_output`` wiring without a model file. The
integration suite checks mechanics (invoke, stream, batch, tool-call round trips, structured output, usage metadata),
not answer quality, so it runs the real small GGUF (Qwen2.5-Coder-0.5B, much faster than the default 1.5B on two
cores): every test gets a copy of the session's ``small_chat_model`` (one llama.cpp load for the whole
class and the loop-guard test; copies share it), with a small ``max_tokens``. The 1.5B runs the same kinds of calls
with answer checks in `tests/models/test_llamacpp.py`.

Declared: tool calling with ``tool_choice``, structured output (default ``method="json_schema"``), JSON mode, usage
metadata (streaming too); no image, audio or PDF inputs, no per-call model override (one GGUF per instance).
"""
from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from ctxrag.models.llamacpp import LocalLlamaChatModel

SUITE_MAX_TOKENS = 96
"""Enough for the standard suite's joke-shaped JSON replies; small enough to keep the suite short."""


class TestLocalLlamaChatModelUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return LocalLlamaChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model_path": "unused-by-the-unit-suite.gguf"}  # the model loads on first call only

    @property
    def standard_chat_model_params(self) -> dict[str, Any]:
        return {"temperature": 0, "max_tokens": 100, "stop": []}  # no timeout / max_retries: in-process

    @property
    def supports_json_mode(self) -> bool:
        return True


@pytest.mark.llm
class TestLocalLlamaChatModelIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return LocalLlamaChatModel

    @pytest.fixture(autouse=True)
    def _loaded(self, small_chat_model: LocalLlamaChatModel) -> None:
        self.loaded = small_chat_model

    @property
    def chat_model_params(self) -> dict[str, Any]:
        """Models the suite builds itself (``chat_model_class(**chat_model_params)``) find the loaded file and
        ``n_ctx``, so they share the session's llama.cpp model too."""
        return {"model_path": self.loaded.model_path, "n_ctx": self.loaded.n_ctx, "max_tokens": SUITE_MAX_TOKENS}

    @pytest.fixture
    def model(self, request: Any, small_chat_model: LocalLlamaChatModel) -> BaseChatModel:
        """A copy of the session's loaded model (shares its llama.cpp context), with the suite's parameters."""
        extra = getattr(request, "param", None) or {}
        return small_chat_model.model_copy(update={"max_tokens": SUITE_MAX_TOKENS, **extra})

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def supported_usage_metadata_details(self) -> dict[str, list[str]]:
        return {"invoke": [], "stream": []}

    @property
    def supports_image_inputs(self) -> bool:
        return False

    @property
    def supports_audio_inputs(self) -> bool:
        return False

    @property
    def supports_pdf_inputs(self) -> bool:
        return False
