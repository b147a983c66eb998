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
