"""Benchmark results as JSON, the one source of the benchmark pages (docs/benchmarks/<name>.md).

Every benchmark that has a page ends with one call of :func:`write_page_data`; ``python bench/report.py`` renders
``docs/benchmarks/data/<name>.json`` into ``docs/benchmarks/<name>.md``. The machine (CPU model, cores, instruction
sets), the load average, the date and the commit are filled in here, so no page carries a hand-written number.

Example::

    from pagedata import write_page_data, Table
    write_page_data(
        "ingest_throughput",
        title="Ingest throughput",
        measures="files/s and chunks/s of `ctxrag ingest`",
        data="5,000 generated one-line files (made by the benchmark)",
        command="python bench/bench_ingest.py",
        tables=[Table(caption="before and after", columns=["variant", "files/s"], rows=[["old", 1.2], ["new", 7.5]])],
    )
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "docs" / "benchmarks" / "data"
SHARED_DATA = Path(os.environ.get("CTXRAG_SHARED_DATA", ROOT.parent / "shared" / "data"))
"""The workplace's data sets (``../shared/data`` beside the checkout; ``CTXRAG_SHARED_DATA`` to point elsewhere)."""
_ISA = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "fma", "f16c")


@dataclass
class RunRecord:
    """Where, when and at which commit a run happened, for results transcribed from an earlier record (a README,
    a commit message) rather than measured by this process. ``machine`` has :func:`machine`'s keys; a value the
    record does not state is the string ``"not recorded"``. ``source`` says where the numbers were read."""

    machine: dict[str, Any]
    date: str
    commit: str
    source: str


@dataclass
class Table:
    """One table of a benchmark page: a caption, column names and rows of cells (str or numbers)."""

    caption: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str] = field(default_factory=list)


def machine() -> dict[str, Any]:
    """The machine a run happened on: CPU model, cores, instruction sets, load average, Python."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "isa": [f for f in _ISA if f in flags],
        "load_avg": load,
        "python": platform.python_version(),
    }


def commit() -> str:
    """The repository's HEAD (short), with ``+dirty`` when tracked files differ from it."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


_READER_DIRS = {str(Path(tempfile.gettempdir())): "$TMPDIR", str(Path.home()): "~"}
_MACHINE_DIRS = re.compile("(" + "|".join(re.escape(d) for d in sorted(_READER_DIRS, key=len, reverse=True))
                           + r")/")
"""Scratch and home folders of the machine a run happened on, written as a reader's (``$TMPDIR/``, ``~/``)."""


def _portable(value: Any) -> Any:
    """`value` with this machine's folders written as a reader's: the checkout as ``.``, the data as
    ``../shared/data`` (a page names no absolute path of the machine it ran on)."""
    if isinstance(value, str):
        value = value.replace(str(SHARED_DATA), "../shared/data").replace(str(ROOT.parent / "shared"), "../shared") \
            .replace(str(ROOT), ".")
        return _MACHINE_DIRS.sub(lambda m: _READER_DIRS[m.group(1)] + "/", value)
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_portable(v) for v in value]
    return value


def write_page_data(
    name: str,
    *,
    title: str,
    measures: str,
    data: str,
    command: str | None = None,
    tables: Sequence[Table],
    notes: Sequence[str] = (),
    out_dir: Path | None = None,
    recorded: RunRecord | None = None,
) -> Path:
    """Write ``<out_dir>/<name>.json`` (default ``docs/benchmarks/data``) with the machine, date and commit filled in.

    ``command`` defaults to the command line this process was started with. ``recorded`` replaces the machine, date
    and commit of this process with those of an earlier run (numbers transcribed from its record) and adds its
    ``source`` to the JSON.
    """
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"benchmark page name {name!r}: use letters, digits, '_' and '-'")
    if not tables:
        raise ValueError(f"benchmark page {name!r}: at least one table is needed")
    for table in tables:
        for i, row in enumerate(table.rows):
            if len(row) != len(table.columns):
                raise ValueError(f"benchmark page {name!r}, table {table.caption!r}, row {i}: "
                                 f"{len(row)} cells for {len(table.columns)} columns")
    payload = _portable({
        "name": name,
        "title": title,
        "measures": measures,
        "data": data,
        "command": command or "python " + " ".join(sys.argv),
        "machine": recorded.machine if recorded else machine(),
        "date": recorded.date if recorded else _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": recorded.commit if recorded else commit(),
        "tables": [asdict(t) for t in tables],
        "notes": list(notes),
    })
    if recorded:
        payload["source"] = recorded.source
    out = Path(out_dir) if out_dir is not None else DATA_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(payload, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path
