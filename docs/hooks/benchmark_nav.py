"""MkDocs hook: the "Benchmarks" section of the nav lists every page bench/report.py renders from
docs/benchmarks/data/*.json, so a new benchmark's page appears without editing mkdocs.yml."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SECTION = "Benchmarks"


def benchmark_entries(docs_dir: Path) -> list[Any]:
    """The index first, then one ``{title: path}`` per benchmark JSON, by title."""
    pages = []
    for path in sorted((docs_dir / "benchmarks" / "data").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        title = str(data.get("title") or path.stem).split(":")[0]
        pages.append({title: f"benchmarks/{path.stem}.md"})
    return ["benchmarks/index.md", *sorted(pages, key=lambda entry: next(iter(entry)).lower())]


def on_config(config: Any) -> Any:
    nav = config.get("nav") or []
    for entry in nav:
        if isinstance(entry, dict) and SECTION in entry:
            entry[SECTION] = benchmark_entries(Path(config["docs_dir"]))
    return config
