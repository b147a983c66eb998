"""Numbered knowledge blocks and `[n]` citation parsing, shared by the answer chains."""
from __future__ import annotations

import re
from typing import Any

from langchain_core.documents import Document

_CITE = re.compile(r"\[(\d{1,3}(?:\s*[,，、]\s*\d{1,3})*)\]")


def format_knowledge(docs: list[Document], max_chars: int | None = None) -> str:
    """``[n] (title — source) text`` blocks, numbered from 1 in retrieval order."""
    blocks = []
    for i, d in enumerate(docs, 1):
        md = d.metadata
        label = md.get("title") or ""
        src = md.get("source") or ""
        head = f"{label} — {src}" if label and src and label not in src else (src or label)
        text = d.page_content if max_chars is None else d.page_content[:max_chars]
        blocks.append(f"[{i}] ({head})\n{text}")
    return "\n\n".join(blocks)


def cited_numbers(answer: str) -> list[int]:
    """Numbers cited as ``[n]`` or ``[n, m]`` in order of first appearance."""
    seen: list[int] = []
    for m in _CITE.finditer(answer):
        for part in re.split(r"[,，、]", m.group(1)):
            n = int(part.strip())
            if n not in seen:
                seen.append(n)
    return seen


def source_entry(n: int, d: Document) -> dict[str, Any]:
    md = d.metadata
    return {
        "n": n, "chunk_id": md.get("chunk_id") or d.id, "source": md.get("source"), "title": md.get("title"),
        "kb": md.get("kb"), "heading_path": md.get("heading_path"), "score": md.get("score"), "text": d.page_content,
    }


def map_citations(answer: str, docs: list[Document]) -> dict[str, Any]:
    """Citations in `answer` mapped to the numbered `docs`: cited sources, and numbers that match no source."""
    nums = cited_numbers(answer)
    valid = [n for n in nums if 1 <= n <= len(docs)]
    return {
        "sources": [source_entry(n, docs[n - 1]) for n in valid],
        "invalid_citations": [n for n in nums if n not in valid],
    }
