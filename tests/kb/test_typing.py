"""`mypy --strict` holds on the knowledge-base package (`ctxrag.kb`: the protocol, the registry, both backends and
their rooms), on the chains (`ctxrag.chains`: the ask chain, the assistant and their steps) and on the layers that
pass knowledge bases and chat models to them (`ctxrag.cli`, `ctxrag.server`, `ctxrag.evaluation`: typed against
`KnowledgeBaseProtocol` and `BaseChatModel`, not `Any`). Imports from the rest of ctxrag are followed for their types
but not reported (``--follow-imports silent``). mypy comes with the dev extra (pyproject.toml); without it the test is
skipped, named as such."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxrag.testing.llm_server import HANG_GUARD_S

pytestmark = pytest.mark.slow  # mypy reads langchain-core's types first

ROOT = Path(__file__).resolve().parents[2]


def mypy_strict(*paths: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is in the dev extra: pip install -e '.[dev]'")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
                           "--config-file", str(ROOT / "pyproject.toml"), *paths],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_kb_package_is_strictly_typed() -> None:
    run = mypy_strict("src/ctxrag/kb")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout, run.stdout


def test_chains_package_is_strictly_typed() -> None:
    run = mypy_strict("src/ctxrag/chains")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout, run.stdout


def test_cli_server_and_evaluation_are_strictly_typed() -> None:
    run = mypy_strict("src/ctxrag/cli", "src/ctxrag/server", "src/ctxrag/evaluation")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout, run.stdout


def test_the_check_fails_on_a_typing_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from ctxrag.kb import KnowledgeBaseProtocol\n\n\n"
                   "def name_of(kb: KnowledgeBaseProtocol) -> int:\n    return kb.name\n", encoding="utf-8")
    run = mypy_strict(str(bad))
    assert run.returncode == 1 and "Incompatible return value type" in run.stdout, run.stdout
