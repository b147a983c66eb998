"""Benchmark: how long the two test lanes take (docs/testing.md), as whole pytest processes.

    python bench/bench_test_lanes.py                       # both lanes, one after the other
    python bench/bench_test_lanes.py --lane fast           # only the fast lane
    python bench/bench_test_lanes.py --beside "yes > /dev/null"   # with a CPU-heavy job beside it

Each lane runs as ``python -m pytest -m <marker expression> -q`` in the repository root; the table has its wall
time, the pytest summary and the load average before and after. Writes ``docs/benchmarks/data/test_lanes.json``
through `bench/pagedata.py`.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import ROOT, Table, write_page_data  # noqa: E402

LANES = {"fast": "not llm and not slow", "rest": "llm or slow"}
_SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed).*?) in [\d.]+s", re.M)


def run_lane(expression: str) -> tuple[float, str, int]:
    """Run one lane; return (seconds, pytest's summary line, exit code)."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", expression, "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    found = _SUMMARY.findall(proc.stdout)
    return seconds, found[-1][0] if found else "no pytest summary", proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lane", choices=[*LANES, "both"], default="both")
    ap.add_argument("--beside", default=None, help="a shell command run beside the lanes (killed at the end)")
    ap.add_argument("--no-page", action="store_true", help="print only; do not write the page data")
    args = ap.parse_args()
    lanes = list(LANES) if args.lane == "both" else [args.lane]
    beside = subprocess.Popen(args.beside, shell=True, start_new_session=True) if args.beside else None
    rows = []
    try:
        for lane in lanes:
            before = os.getloadavg()[0]
            seconds, summary, code = run_lane(LANES[lane])
            rows.append([lane, f'-m "{LANES[lane]}"', round(seconds / 60, 1), summary, code,
                         f"{before:.1f} / {os.getloadavg()[0]:.1f}"])
            print(rows[-1], flush=True)
    finally:
        if beside is not None:
            os.killpg(beside.pid, 9)
    if not args.no_page:
        write_page_data(
            "test_lanes",
            title="Test lanes",
            measures="wall time of the fast lane and of the rest of the suite, each as one pytest process",
            data="the repository's own test suite",
            tables=[Table(caption="one run of each lane" + (f", beside `{args.beside}`" if args.beside else ""),
                          columns=["lane", "markers", "minutes", "pytest summary", "exit code",
                                   "load before / after"], rows=rows)],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
