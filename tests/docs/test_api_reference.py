"""The API reference (docs/api.md) covers the public surface: every name `ctxrag` exports, where it is defined, and
the LangChain components a user drops into their own code."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import ctxrag

API = Path(__file__).resolve().parents[2] / "docs" / "api.md"
COMPONENTS = ["ctxrag.kb.vectorstore.KnowledgeBaseVectorStore", "ctxrag.models.llamacpp.LocalLlamaChatModel",
              "ctxrag.chains.relevance.RelevanceGate", "ctxrag.chains.evidence.EvidenceCheck",
              "ctxrag.chains.short_answer.ExtractiveAnswer", "ctxrag.chains.assistant.Assistant"]


def _documented() -> set[str]:
    return set(re.findall(r"^::: ([\w.]+)\s*$", API.read_text(encoding="utf-8"), re.M))


def test_every_export_is_in_the_reference_where_it_is_defined() -> None:
    documented = _documented()
    missing = []
    for name in ctxrag.__all__:
        if name == "__version__":
            continue
        module = getattr(ctxrag, name).__module__
        if f"{module}.{name}" not in documented and module not in documented:
            missing.append(f"{module}.{name}")
    assert not missing, f"docs/api.md lacks: {missing}"


def test_langchain_components_are_in_the_reference() -> None:
    assert not set(COMPONENTS) - _documented()


def test_every_reference_entry_imports() -> None:
    for path in _documented():
        module, _, attr = path.rpartition(".")
        try:
            importlib.import_module(path)
        except ModuleNotFoundError:
            assert hasattr(importlib.import_module(module), attr), path
