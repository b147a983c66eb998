"""Every decimal figure of the README's "What it does better" table is on the benchmark page its row links to: a
headline cannot outlive the run that measured it (the pages are generated from their runs' JSON; see
`tests/docs/test_benchmark_pages.py` for their freshness)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")
LINK = re.compile(r"\]\((docs/benchmarks/[\w-]+\.md)\)")


def headline_rows() -> list[tuple[str, str, Path]]:
    """(row label, the row's ctxrag and peer cells, the page it links) for each row of the README's table."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text.split("## What it does better", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        link = LINK.search(cells[-1])
        assert link, f"README headline row {cells[0]!r} links no benchmark page"
        rows.append((cells[0], " ".join(cells[1:-1]), REPO / link.group(1)))
    return rows


def test_the_readme_has_headline_rows() -> None:
    assert len(headline_rows()) >= 5


@pytest.mark.parametrize("label, figures, page", headline_rows(), ids=lambda v: str(v)[:40])
def test_each_readme_figure_is_on_its_page(label: str, figures: str, page: Path) -> None:
    on_page = page.read_text(encoding="utf-8")
    missing = [f for f in FIGURE.findall(figures) if f not in on_page]
    assert not missing, f"README row {label!r}: {missing} not on {page.relative_to(REPO)}"


def test_the_install_pages_venv_sizes_are_the_install_size_pages() -> None:
    """docs/install.md's package counts and MiB of a new venv are those of the install_size page's run."""
    import json

    text = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    para = text.split("**Size of a new project's venv**", 1)[1].split("\n\n", 1)[0]
    said = {name: (int(n), int(mib.replace(",", ""))) for name, n, mib in
            re.findall(r"`(ctxrag(?:\[[\w,]+\])?)`(?:\s+alone)?\s+(\d+)\s+packages,\s+([\d,]+)\s+MiB", para)}
    rows = json.loads((REPO / "docs" / "benchmarks" / "data" / "install_size.json").read_text(encoding="utf-8"))
    measured = {r[0]: (r[1], r[2]) for r in rows["tables"][0]["rows"]}
    assert len(said) >= 3 and all(measured[k] == v for k, v in said.items()), (said, measured)
