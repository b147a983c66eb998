"""The knowledge-base backends by name: ``settings.store`` -> the class that opens, lists and deletes knowledge
bases there. The one place that knows which backends exist; `KnowledgeBase.open`, the CLI and the server ask it.

Each backend is named by its import path (``"module:Class"``) and imported on first use, as entry points are: opening a
local knowledge base never imports pymilvus, and a backend module may itself open through the registry without an
import cycle.

Example::

    from ctxrag.kb.registry import backend, open_kb, list_names
    from ctxrag.settings import Settings
    backend("milvus")                                       # <class 'ctxrag.kb.milvus.MilvusKnowledgeBase'>
    kb = open_kb("demo", Settings(store="local"))           # a ctxrag.kb.local.KnowledgeBase
    list_names(Settings(store="local"))                     # ['demo', ...]
"""
from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, cast

from ctxrag.errors import ConfigError
from ctxrag.settings import Settings, get_settings

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.embeddings import Embeddings

    from ctxrag.kb.protocol import KnowledgeBaseBackend, KnowledgeBaseProtocol

_NAME_RE = re.compile(r"[A-Za-z0-9\u4e00-\u9fff][\w\u4e00-\u9fff.-]{0,63}")  # fullmatch: no trailing newline


def validate_kb_name(name: str) -> str:
    """`name` when it is a valid knowledge base name (on every backend), else `ConfigError` naming it."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name in {".", ".."}:
        raise ConfigError(
            f"invalid knowledge base name {name!r}: use 1-64 letters, digits, CJK, '_', '-', '.', starting with a letter or digit"
        )
    return name


BACKENDS: dict[str, str] = {
    "local": "ctxrag.kb.local:KnowledgeBase",
    "milvus": "ctxrag.kb.milvus:MilvusKnowledgeBase",  # the whole knowledge base in Milvus (docs/scale.md)
}
"""``settings.store`` value -> ``"module:Class"`` of its `KnowledgeBaseBackend`."""


def backend(store: str) -> type[KnowledgeBaseBackend]:
    """The backend class for a ``settings.store`` value; `ConfigError` naming it when there is none."""
    try:
        module, _, attr = BACKENDS[store].partition(":")
    except KeyError:
        raise ConfigError(f"unknown knowledge base store {store!r}: use one of {sorted(BACKENDS)}") from None
    return cast("type[KnowledgeBaseBackend]", getattr(importlib.import_module(module), attr))


def open_kb(name: str, settings: Settings | None = None, *, create: bool = True,
            embeddings: Embeddings | None = None) -> KnowledgeBaseProtocol:
    """Open (by default create) the knowledge base `name` in the store `settings` names."""
    s = settings or get_settings()
    return backend(s.store).open(validate_kb_name(name), s, create=create, embeddings=embeddings)


def list_names(settings: Settings | None = None) -> list[str]:
    """The knowledge bases in the store `settings` names, sorted."""
    s = settings or get_settings()
    return backend(s.store).list_names(s)


def delete_kb(name: str, settings: Settings | None = None) -> None:
    """Delete the knowledge base `name` from the store `settings` names; `KnowledgeBaseNotFound` when absent."""
    s = settings or get_settings()
    backend(s.store).delete_kb(validate_kb_name(name), s)
