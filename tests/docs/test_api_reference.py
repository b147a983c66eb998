"""The API reference (docs/api.md) covers the public surface: every name `ctxrag` exports, where it is defined, the
LangChain components a user drops into their own code, and every name the guides take from a ctxrag submodule (a
Python block's ``from ctxrag.x import Y``, a class named as ``ctxrag.x.Y``)."""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import ctxrag

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api.md"
DEVELOPER_PAGES = {"api.md", "architecture.md", "development.md", "testing.md"}
"""Pages for people working on ctxrag itself: they name internals on purpose."""
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


def _guides() -> list[Path]:
    return [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in DEVELOPER_PAGES)]


def _defined_at(module: str, name: str) -> str | None:
    """``module.name`` where it is defined, or None when it is a module or no such name."""
    obj = getattr(importlib.import_module(module), name, None)
    if obj is None or inspect.ismodule(obj):
        return None
    return f"{getattr(obj, '__module__', module)}.{name}"


def _named_by_guides() -> dict[str, set[str]]:
    """What the guides use from ctxrag submodules, where it is defined -> the pages that use it."""
    used: dict[str, set[str]] = {}
    for page in _guides():
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```python\n(.*?)```", text, re.S):
            for module, names in re.findall(r"^\s*from (ctxrag\.[\w.]+) import \(?([^)\n#]+)", block, re.M):
                for name in (n.split(" as ")[0].strip() for n in names.split(",")):
                    where = _defined_at(module, name) if name else None
                    if where:
                        used.setdefault(where, set()).add(page.name)
        for dotted in re.findall(r"`(ctxrag(?:\.\w+)+)", text):
            parts = dotted.split(".")
            for i in range(len(parts) - 1, 1, -1):  # the longest importable module, then the name after it
                try:
                    importlib.import_module(".".join(parts[:i]))
                except ImportError:
                    continue
                obj = getattr(importlib.import_module(".".join(parts[:i])), parts[i], None)
                if inspect.isclass(obj):
                    used.setdefault(f"{obj.__module__}.{parts[i]}", set()).add(page.name)
                break
    return used


def test_every_name_the_guides_use_from_a_submodule_is_in_the_reference() -> None:
    documented = _documented()
    missing = {where: sorted(pages) for where, pages in _named_by_guides().items()
               if where not in documented and where.rpartition(".")[0] not in documented}
    assert not missing, f"docs/api.md lacks (name: pages using it): {missing}"
