"""Where a chunk's context goes in the text that is embedded and BM25-indexed, and import of precomputed contexts.

The chunk's own text stays the content users see and cite; only the *indexed* text carries the context.

Example::

    from ctxrag.indexing.placement import apply_context, load_precomputed_contexts
    apply_context("Revenue grew 3%.", "From ACME's 2023 annual report.")
    # 'From ACME's 2023 annual report.\\n\\nRevenue grew 3%.'
    contexts = load_precomputed_contexts("contexts.jsonl")                      # {chunk_id: context}
    contexts = load_precomputed_contexts("bench.jsonl", key=("doc_id", "original_index"))  # {"doc_1_0": ...}
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from ctxrag.enums import ChoiceEnum
from ctxrag.errors import ConfigError, LoadError
from ctxrag.schema import CONTEXT

CONTEXT_SEPARATOR = "\n\n"


class ContextPlacement(ChoiceEnum):
    """Where the context goes relative to the chunk text: before it (Anthropic's choice, default) or after it."""

    __label__ = "context placement"
    __error__ = ConfigError

    PREPEND = "prepend"
    APPEND = "append"


def apply_context(chunk_text: str, context: str | None, placement: str | ContextPlacement = "prepend") -> str:
    """The text to index for a chunk: the context before (``prepend``) or after (``append``) the chunk text."""
    where = ContextPlacement.from_str(placement)
    if not context or not context.strip():
        return chunk_text
    if where is ContextPlacement.PREPEND:
        return f"{context.strip()}{CONTEXT_SEPARATOR}{chunk_text}"
    return f"{chunk_text}{CONTEXT_SEPARATOR}{context.strip()}"


def text_to_index(chunk: Document, placement: str | ContextPlacement = "prepend") -> str:
    """`apply_context` on a chunk `Document` whose context sits in ``metadata["context"]``."""
    return apply_context(chunk.page_content, chunk.metadata.get(CONTEXT), placement)


def load_precomputed_contexts(
    path: str | Path,
    *,
    key: str | Sequence[str] = "chunk_id",
    sep: str = "_",
    context_field: str = "context",
) -> dict[str, str]:
    """Read a JSONL of contexts made elsewhere into ``{id: context}``.

    `key` names the field holding the chunk id, or several fields joined with `sep` (Anthropic's benchmark file:
    ``key=("doc_id", "original_index")`` gives ``"doc_1_0"``). Blank lines are skipped; a malformed line, a missing
    field, a non-string context or a repeated id raises `LoadError` naming the file and line number.
    """
    fields = [key] if isinstance(key, str) else list(key)
    if not fields:
        raise ConfigError("load_precomputed_contexts: key must name at least one field")
    path = Path(path)
    if not path.is_file():
        raise LoadError(path, "no such file")
    contexts: dict[str, str] = {}
    first_line: dict[str, int] = {}
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row: Any = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LoadError(path, f"line {lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise LoadError(path, f"line {lineno}: expected a JSON object, got {type(row).__name__}")
            missing = [f for f in [*fields, context_field] if f not in row]
            if missing:
                raise LoadError(path, f"line {lineno}: missing field(s) {missing}")
            context = row[context_field]
            if not isinstance(context, str):
                raise LoadError(path, f"line {lineno}: field {context_field!r} must be a string, got {type(context).__name__}")
            chunk_id = sep.join(str(row[f]) for f in fields)
            if chunk_id in contexts:
                raise LoadError(path, f"line {lineno}: id {chunk_id!r} repeats line {first_line[chunk_id]}")
            contexts[chunk_id] = context.strip()
            first_line[chunk_id] = lineno
    return contexts
