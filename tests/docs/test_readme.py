"""The README is a short guide: at most 250 lines, the set-up commands CI runs, no dated narrative, no machine names,
and every link to a file of the repository resolves."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_short() -> None:
    assert len(README.splitlines()) <= 250


def test_setup_commands_first_and_ci_runs_the_test_one() -> None:
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "bash scripts/bootstrap.sh && .venv/bin/ctxrag demo" in first_block
    assert "bash scripts/bootstrap.sh && .venv/bin/python -m pytest" in first_block
    assert "bash scripts/bootstrap.sh && .venv/bin/python -m pytest" in (REPO / ".ci" / "run").read_text("utf-8")


def test_no_dates_or_machines() -> None:
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d\b", README)
    assert not re.findall(r"\b(Xeon|EPYC|AMD|Intel|idle machine|load average)\b", README, flags=re.I)


def test_local_links_resolve() -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_the_python_block_runs_in_a_folder_without_the_checkout(tmp_path: Path) -> None:
    """The README's first Python block as a user runs it from their own project folder, then the same ingest of a
    path that does not exist there: it raises `PathNotFound` naming the path, as the block's comment says."""
    import os
    import subprocess
    import sys

    block = README.split("<!-- --8<-- [start:python] -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    project = tmp_path / "project"
    project.mkdir()
    script = project / "app.py"
    script.write_text(block + "\ntry:\n    kb.ingest(['examples/sample_corpus'])\nexcept FileNotFoundError as e:\n"
                      "    print('raised', type(e).__name__, e)\n", encoding="utf-8")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE"},
           "CTXRAG_HOME": str(tmp_path / "home"), "CTXRAG_CONTEXTUALIZE": "false", "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, str(script)], cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any("xinghe_overview.md" in line for line in lines[:4]), lines  # the shipped corpus answered the search
    assert lines[-1].startswith("raised PathNotFound examples/sample_corpus: no such file or directory"), lines[-1]
