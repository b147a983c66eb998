"""Evaluation-only dependencies (matplotlib, langchain-community) are the ``[eval]`` extra: a plain install imports
neither, and the code that needs one says which extra to install."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ctxrag.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_base_dependencies_leave_evaluation_packages_to_the_eval_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = " ".join(project["dependencies"])
    assert "matplotlib" not in base and "langchain-community" not in base
    assert any(r.startswith("matplotlib") for r in project["optional-dependencies"]["eval"])


def test_the_library_surface_imports_neither() -> None:
    probe = ("import sys, ctxrag; from ctxrag import KnowledgeBase, build_ask_chain, build_rag_chain; "
             "import ctxrag.cli.main, ctxrag.evaluation.runner, ctxrag.server.runnables, ctxrag.chains.assistant; "
             "print(sorted(m for m in ('matplotlib', 'langchain_community') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ctxrag.evaluation.report import plot_results
    from ctxrag.evaluation.stock_chain import stock_answer_chain

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.setitem(sys.modules, "langchain_community.retrievers", None)
    with pytest.raises(ConfigError, match=r"pip install 'ctxrag\[eval\]'"):
        plot_results([], tmp_path / "p.png", [1])
    with pytest.raises(ConfigError, match=r"pip install 'ctxrag\[eval\]'"):
        stock_answer_chain({}, None, k=1)  # type: ignore[arg-type]
