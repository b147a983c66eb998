"""The import-linter contracts in pyproject.toml ([tool.importlinter]: the layers and no cycles) hold for this
checkout's source, and every top-level module of ctxrag sits in a layer, so a new module cannot escape the check.

Runs import-linter's own CLI (`lint-imports`) on this repository's `src/`; a broken contract fails with its report."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grimp
from importlinter.application.use_cases import read_user_options
from importlinter.configuration import configure

from ctxrag.testing.llm_server import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def contracts() -> list[dict[str, Any]]:
    """The contracts as import-linter reads them from pyproject.toml."""
    configure()
    return read_user_options(config_filename=str(ROOT / "pyproject.toml")).contracts_options


def test_import_contracts_are_kept() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S,
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    assert f"Contracts: {len(contracts())} kept, 0 broken." in report, report


def test_every_top_level_module_is_in_a_layer() -> None:
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    named = {m.strip().strip("()") for layer in layers for m in layer.replace(":", "|").split("|")}
    children = grimp.build_graph("ctxrag", cache_dir=None).find_children("ctxrag")
    assert children - named == set(), f"put these modules in a layer of [tool.importlinter]: {sorted(children - named)}"
    assert named - children == set(), f"layers name modules that do not exist: {sorted(named - children)}"
