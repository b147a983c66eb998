"""Prompt templates used by ctxrag's LLM steps."""
from __future__ import annotations

from ctxrag.prompts.contextual import (
    CHUNK_CONTEXT_PROMPT,
    CHUNK_CONTEXT_PROMPT_ZH,
    DOCUMENT_CONTEXT_PROMPT,
    DOCUMENT_CONTEXT_PROMPT_ZH,
    PROMPT_VERSION,
    ContextPrompt,
    default_context_prompts,
)

__all__ = [
    "CHUNK_CONTEXT_PROMPT",
    "CHUNK_CONTEXT_PROMPT_ZH",
    "DOCUMENT_CONTEXT_PROMPT",
    "DOCUMENT_CONTEXT_PROMPT_ZH",
    "PROMPT_VERSION",
    "ContextPrompt",
    "default_context_prompts",
]
