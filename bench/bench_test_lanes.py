"""Benchmark: how long the two test lanes take (docs/testing.md), and where the fast lane spends its time.

    python bench/bench_test_lanes.py                       # both lanes, each as one pytest process
    python bench/bench_test_lanes.py --lane fast           # only the fast lane
    python bench/bench_test_lanes.py --beside "yes > /dev/null"   # with a CPU-heavy job beside it
    python bench/bench_test_lanes.py --per-folder          # the fast lane one top-level test folder at a time

A lane runs as ``python -m pytest -m <marker expression> -q`` in the repository root; its row has the wall time, the
pytest summary, the CPU time (see `run_pytest`) and the load average before and after. ``--per-folder`` runs the fast lane once per folder of
``tests/`` (the files directly in ``tests/`` together) with ``--durations``, and adds the folder times and the
slowest tests (setup, call or teardown, as pytest reports them). Writes ``docs/benchmarks/data/test_lanes.json``
through `bench/pagedata.py`.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import ROOT, Table, write_page_data  # noqa: E402

LANES = {"fast": "not llm and not slow", "rest": "llm or slow"}
_SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed).*?) in [\d.]+s", re.M)
_DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)", re.M)
TOP_TESTS = 15


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_pytest(expression: str, paths: list[str], durations: bool = False) -> tuple[float, float, str, int, str]:
    """Run pytest on `paths` with ``-m expression``; return (wall seconds, CPU seconds of pytest and the processes it
    waited for, pytest's summary line, exit code, stdout). CPU time barely moves with the machine's load, so it is
    the number to compare between busy runs; on two idle cores the wall time lies between half of it and all of it."""
    cmd = [sys.executable, "-m", "pytest", *paths, "-m", expression, "-q", "-p", "no:cacheprovider"]
    if durations:
        cmd.append("--durations=30")
    cpu, start = _children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds, cpu = time.monotonic() - start, _children_cpu() - cpu
    found = _SUMMARY.findall(proc.stdout)
    return seconds, cpu, found[-1][0] if found else "no pytest summary", proc.returncode, proc.stdout


def test_folders() -> list[tuple[str, list[str]]]:
    """(label, pytest paths): each folder of tests/ with tests, then the files directly in tests/."""
    tests = ROOT / "tests"
    folders = [(d.name, [f"tests/{d.name}"]) for d in sorted(tests.iterdir())
               if d.is_dir() and any(d.rglob("test_*.py"))]
    return folders + [("tests/*.py", sorted(f"tests/{f.name}" for f in tests.glob("test_*.py")))]


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def lanes_table(lanes: list[str], beside: str | None) -> Table:
    rows = []
    for lane in lanes:
        before = _load()
        seconds, cpu, summary, code, _ = run_pytest(LANES[lane], [])
        rows.append([lane, f'-m "{LANES[lane]}"', round(seconds / 60, 1), round(cpu / 60, 1), summary, code,
                     f"{before} / {_load()}"])
        print(rows[-1], flush=True)
    return Table(caption="each lane as one pytest process" + (f", beside `{beside}`" if beside else ""),
                 columns=["lane", "markers", "minutes", "CPU minutes", "pytest summary", "exit code",
                          "load before / after"],
                 rows=rows)


def per_folder_tables(beside: str | None) -> list[Table]:
    rows, slow = [], []
    for label, paths in test_folders():
        before = _load()
        seconds, cpu, summary, code, out = run_pytest(LANES["fast"], paths, durations=True)
        rows.append([label, round(seconds, 1), round(cpu, 1), summary, code, f"{before} / {_load()}"])
        print(rows[-1], flush=True)
        slow += [(float(s), phase, test) for s, phase, test in _DURATION.findall(out)]
    slow.sort(reverse=True)
    wall, cpu = round(sum(r[1] for r in rows) / 60, 1), round(sum(r[2] for r in rows) / 60, 1)
    where = f", beside `{beside}`" if beside else ""
    return [
        Table(caption=f"fast lane, one pytest process per test folder{where} (sum: {wall} minutes, {cpu} CPU minutes)",
              columns=["folder", "seconds", "CPU seconds", "pytest summary", "exit code", "load before / after"],
              rows=rows),
        Table(caption=f"the {TOP_TESTS} slowest fast-lane steps of those runs",
              columns=["seconds", "phase", "test"], rows=[[s, p, t] for s, p, t in slow[:TOP_TESTS]]),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lane", choices=[*LANES, "both", "none"], default="both")
    ap.add_argument("--per-folder", action="store_true", help="also run the fast lane folder by folder, with durations")
    ap.add_argument("--beside", default=None, help="a shell command run beside the lanes (killed at the end)")
    ap.add_argument("--note", action="append", default=[], help="a note for the page (repeatable)")
    ap.add_argument("--no-page", action="store_true", help="print only; do not write the page data")
    args = ap.parse_args()
    lanes = {"both": list(LANES), "none": []}.get(args.lane, [args.lane])
    beside = subprocess.Popen(args.beside, shell=True, start_new_session=True) if args.beside else None
    tables = []
    try:
        if args.per_folder:
            tables += per_folder_tables(args.beside)
        if lanes:
            tables.append(lanes_table(lanes, args.beside))
    finally:
        if beside is not None:
            os.killpg(beside.pid, 9)
    if not args.no_page:
        write_page_data(
            "test_lanes",
            title="Test lanes",
            measures="wall time of the fast lane (per test folder and whole) and of the rest of the suite",
            data="the repository's own test suite",
            tables=tables,
            notes=args.note,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
