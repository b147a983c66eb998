"""Turning a model's answer into a context: label stripping, length cap, echo detection, and the fallback header."""
from __future__ import annotations

import re

_LABEL = re.compile(r"^\s*\**\s*(?:succinct\s+)?(?:context|上下文|背景)\s*\**\s*[:：]\s*\**\s*", re.IGNORECASE)


def clean_context(text: str, max_chars: int = 600) -> str:
    """Strip, drop a leading "Context:"/"上下文：" label, collapse whitespace, cap at `max_chars` on a word boundary."""
    text = _LABEL.sub("", text.strip())
    text = " ".join(text.split()).strip().strip('"').strip()
    if len(text) > max_chars:
        cut = text[:max_chars]
        space = cut.rfind(" ")
        text = (cut[:space] if space > max_chars // 2 else cut).rstrip()
    return text


def fallback_header(title: str = "", heading_path: str = "") -> str:
    """The deterministic context used when no LLM answers: "title > heading path" (either part may be empty)."""
    return " > ".join(part.strip() for part in (title, heading_path) if part and part.strip())


def useless_reason(context: str, chunk: str) -> str | None:
    """Why an answer adds nothing to the chunk (empty, or the chunk's own words echoed back), else None."""
    if not context:
        return "the LLM returned an empty context"
    if " ".join(context.split()).lower() in " ".join(chunk.split()).lower():
        return "the LLM echoed the chunk instead of situating it"
    return None
