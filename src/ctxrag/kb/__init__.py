"""Knowledge bases: one contract (`protocol`), its backends (`local`, `milvus`) behind one registry (`registry`),
and their rooms: maintenance (``kb check``/``kb repair``), the LangChain ``VectorStore`` face (`vectorstore`), the
document catalog (`catalog`, ``kb.catalog()``) and notes (`notes`, ``NoteBook(kb)``).

Code above this package (CLI, server, evaluation, tools) imports from ``ctxrag.kb`` only, never a backend module
(an import-linter contract in pyproject.toml), and types a knowledge base as `KnowledgeBaseProtocol`.

Example::

    from ctxrag.kb import KnowledgeBase, list_names
    from ctxrag.settings import Settings
    kb = KnowledgeBase.open("demo")                                   # settings.store picks the backend
    wiki = KnowledgeBase.open("wiki", Settings(store="milvus"))       # a MilvusKnowledgeBase, same contract
    list_names()                                                      # ['demo', ...]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxrag.kb.local import KnowledgeBase
from ctxrag.kb.registry import BACKENDS, backend, delete_kb, list_names, open_kb, validate_kb_name

if TYPE_CHECKING:  # pragma: no cover - the protocol module loads langchain's retriever base: only when asked for
    from ctxrag.kb.protocol import KnowledgeBaseBackend, KnowledgeBaseProtocol

__all__ = ["BACKENDS", "KnowledgeBase", "KnowledgeBaseBackend", "KnowledgeBaseProtocol", "backend", "delete_kb",
           "list_names", "open_kb", "validate_kb_name"]


def __getattr__(name: str) -> Any:
    if name in {"KnowledgeBaseProtocol", "KnowledgeBaseBackend"}:
        from ctxrag.kb import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module 'ctxrag.kb' has no attribute {name!r}")
