"""`mypy --strict` holds on the knowledge-base package (`ctxrag.kb`: the protocol, the registry, both backends and
their rooms), on the chains (`ctxrag.chains`: the ask chain, the assistant and their steps) and on the layers that
pass knowledge bases and chat models to them (`ctxrag.cli`, `ctxrag.server`, `ctxrag.evaluation`, the agent tools
`ctxrag.tools`: typed against `KnowledgeBaseProtocol` and `BaseChatModel`, not `Any`). Imports from the rest of
ctxrag are followed for their types but not reported (``--follow-imports silent``). mypy comes with the dev extra
(pyproject.toml); without it the test is skipped, named as such.

One mypy process checks every package and a file with a known typing error (`strict_run`, once per module; the
module's tests share one xdist worker): mypy's time is mostly reading langchain-core's types, which one run reads
once, and each test reads the errors of its own files from that run. mypy's incremental cache is kept across test
runs next to the test GGUF (``models_cache_dir().parent / "test-mypy"``, as the embeddings cache is; one per
checkout): a run re-checks the files that changed and those that depend on them, and reports every error again
(from its cache for a module that did not change), so a warm run reads langchain-core's types from the cache."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ctxrag.testing.llm_server import HANG_GUARD_S, models_cache_dir

pytestmark = [pytest.mark.slow,  # mypy reads langchain-core's types first
              pytest.mark.xdist_group("mypy-strict")]  # one worker, so one strict_run

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"kb": ("src/ctxrag/kb",), "chains": ("src/ctxrag/chains",),
            "cli": ("src/ctxrag/cli", "src/ctxrag/server", "src/ctxrag/evaluation", "src/ctxrag/tools.py")}
"""What each test holds to ``mypy --strict``, checked in one run."""
BAD = ("from ctxrag.kb import KnowledgeBaseProtocol\n\n\n"
       "def name_of(kb: KnowledgeBaseProtocol) -> int:\n    return kb.name\n")


StrictRun = tuple[subprocess.CompletedProcess[str], Path]
MYPY_CACHE = models_cache_dir().parent / "test-mypy" / hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
"""mypy's incremental cache, kept across test runs: one per checkout, so two checkouts' runs at once never write
one cache (read from the shell's environment at import, as conftest's)."""


def mypy_strict(*paths: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is in the dev extra: pip install -e '.[dev]'")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           "--cache-dir", str(MYPY_CACHE), "--config-file", str(ROOT / "pyproject.toml"), *paths],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)


@pytest.fixture(scope="module")
def strict_run(tmp_path_factory: pytest.TempPathFactory) -> StrictRun:
    """One ``mypy --strict`` over every package of `PACKAGES` and a file with a typing error (`BAD`); the run and
    that file."""
    bad = tmp_path_factory.mktemp("typing") / "bad.py"
    # a new first line each run: mypy checks the file again rather than replaying the cached error of the file it
    # saw at another run's temporary path (it keys its cache by module name, and the module is "bad" every run)
    bad.write_text(f"# run {uuid.uuid4().hex}\n{BAD}", encoding="utf-8")
    run = mypy_strict(*(p for paths in PACKAGES.values() for p in paths), str(bad))
    # exit 1 is the typing error the run must find; anything else (2: mypy could not run) fails every test here
    assert run.returncode == 1 and "Found " in run.stdout and " source files)" in run.stdout, run.stdout + run.stderr
    return run, bad


def errors_in(run: subprocess.CompletedProcess[str], *paths: str) -> list[str]:
    """mypy's error lines about a file under one of ``paths`` (as given to mypy)."""
    return [line for line in run.stdout.splitlines() if ": error:" in line and line.startswith(paths)]


def test_kb_package_is_strictly_typed(strict_run: StrictRun) -> None:
    assert errors_in(strict_run[0], *PACKAGES["kb"]) == [], strict_run[0].stdout


def test_chains_package_is_strictly_typed(strict_run: StrictRun) -> None:
    assert errors_in(strict_run[0], *PACKAGES["chains"]) == [], strict_run[0].stdout


def test_cli_server_and_evaluation_are_strictly_typed(strict_run: StrictRun) -> None:
    """And the agent tools (`ctxrag.tools`), which pass knowledge bases and a chat model to the ask chain."""
    assert errors_in(strict_run[0], *PACKAGES["cli"]) == [], strict_run[0].stdout


def test_the_check_fails_on_a_typing_error(strict_run: StrictRun) -> None:
    run, bad = strict_run
    found = errors_in(run, str(bad))
    assert len(found) == 1 and "Incompatible return value type" in found[0], run.stdout
    # and nothing else: every error of the run is the bad file's, so no package's error hides behind it
    assert errors_in(run, "") == found, run.stdout
