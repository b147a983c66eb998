"""Benchmark: how long the two test lanes take (docs/testing.md), and where the fast lane spends its time.

    python bench/bench_test_lanes.py                       # both lanes, each as one pytest process
    python bench/bench_test_lanes.py --lane fast           # only the fast lane
    python bench/bench_test_lanes.py --beside "yes > /dev/null"   # with a CPU-heavy job beside it

A lane runs as ``python -m pytest -m <marker expression> -q`` in the repository root; its row has the wall time, the
pytest summary, the CPU time (see `run_pytest`) and the load average before and after. The fast lane also runs with
``--durations=0``, which gives its time per top-level test folder (the files directly in ``tests/`` together) and its
slowest steps (setup, call or teardown). Writes ``docs/benchmarks/data/test_lanes.json`` through `bench/pagedata.py`.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import ROOT, Table, write_page_data  # noqa: E402

LANES = {"fast": "not llm and not slow", "rest": "llm or slow"}
_SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed).*?) in [\d.]+s", re.M)
_DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)", re.M)
TOP_TESTS = 15
LOG_DIR = Path(tempfile.gettempdir()) / "ctxrag-test-lanes"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_pytest(expression: str, paths: list[str], durations: bool = False) -> tuple[float, float, str, int, str]:
    """Run pytest on `paths` with ``-m expression``; return (wall seconds, CPU seconds of pytest and the processes it
    waited for, pytest's summary line, exit code, stdout). CPU time barely moves with the machine's load, so it is
    the number to compare between busy runs; on two idle cores the wall time lies between half of it and all of it."""
    cmd = [sys.executable, "-m", "pytest", *paths, "-m", expression, "-q", "-p", "no:cacheprovider"]
    if durations:
        cmd.append("--durations=0")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"test_lanes_{re.sub(r'[^a-z]+', '_', expression)}.log"  # follow it with tail -f
    cpu, start = _children_cpu(), time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True).returncode
    seconds, cpu = time.monotonic() - start, _children_cpu() - cpu
    stdout = log.read_text(encoding="utf-8", errors="replace")
    found = _SUMMARY.findall(stdout)
    return seconds, cpu, found[-1][0] if found else "no pytest summary", code, stdout


def _folder(test_id: str) -> str:
    parts = test_id.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 else "tests/*.py"


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def lanes_tables(lanes: list[str], beside: str | None) -> list[Table]:
    """One row per lane; for the fast lane also its time per test folder and its slowest steps, from pytest's
    ``--durations`` of the same run."""
    rows, tables = [], []
    where = f", beside `{beside}`" if beside else ""
    for lane in lanes:
        before = _load()
        seconds, cpu, summary, code, out = run_pytest(LANES[lane], [], durations=lane == "fast")
        rows.append([lane, f'-m "{LANES[lane]}"', round(seconds / 60, 1), round(cpu / 60, 1), summary, code,
                     f"{before} / {_load()}"])
        print(rows[-1], flush=True)
        if lane != "fast":
            continue
        steps = sorted(((float(s), phase, test) for s, phase, test in _DURATION.findall(out)), reverse=True)
        folders: dict[str, float] = {}
        for s, _, test in steps:
            folders[_folder(test)] = folders.get(_folder(test), 0.0) + s
        tables.append(Table(caption=f"fast lane by test folder: the sum of its tests' setup, call and teardown{where}",
                            columns=["folder", "seconds"],
                            rows=[[f, round(t, 1)] for f, t in sorted(folders.items(), key=lambda x: -x[1])]))
        tables.append(Table(caption=f"the {TOP_TESTS} slowest steps of the fast lane{where}",
                            columns=["seconds", "phase", "test"], rows=[[s, p, t] for s, p, t in steps[:TOP_TESTS]]))
    lane_table = Table(caption="each lane as one pytest process" + where,
                       columns=["lane", "markers", "minutes", "CPU minutes", "pytest summary", "exit code",
                                "load before / after"], rows=rows)
    return [lane_table, *tables]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lane", choices=[*LANES, "both"], default="both")
    ap.add_argument("--beside", default=None, help="a shell command run beside the lanes (killed at the end)")
    ap.add_argument("--note", action="append", default=[], help="a note for the page (repeatable)")
    ap.add_argument("--no-page", action="store_true", help="print only; do not write the page data")
    args = ap.parse_args()
    lanes = list(LANES) if args.lane == "both" else [args.lane]
    beside = subprocess.Popen(args.beside, shell=True, start_new_session=True) if args.beside else None
    try:
        tables = lanes_tables(lanes, args.beside)
    finally:
        if beside is not None:
            os.killpg(beside.pid, 9)
    if not args.no_page:
        write_page_data(
            "test_lanes",
            title="Test lanes",
            measures="wall and CPU time of the fast lane (whole and per test folder) and of the rest of the suite",
            data="the repository's own test suite",
            tables=tables,
            notes=args.note,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
