"""bench/bench_ingest.py's busy arm: the CPU-bound loops it runs beside a measurement end with it (an error, Ctrl-C,
the bench killed), and the share fair scheduling leaves the measured work."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import bench_ingest  # noqa: E402


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pids: list[int], within_s: float = 120.0) -> bool:  # a hang guard: True as soon as they are gone
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(_running(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_no_loops_is_nothing_started() -> None:
    with bench_ingest.busy_loops(0) as loops_cpu:
        assert loops_cpu() == 0.0


def test_loops_run_in_this_session_and_are_killed_when_the_block_raises() -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="measurement failed"):
        with bench_ingest.busy_loops(2) as loops_cpu:
            children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
            pids = [int(p) for p in children if "-c" in Path(f"/proc/{p}/cmdline").read_text()]
            assert len(pids) == 2 and all(_running(p) for p in pids)
            assert all(os.getsid(p) == os.getsid(0) and os.getpgid(p) == os.getpgid(0) for p in pids)
            time.sleep(0.3)
            assert loops_cpu() > 0.0
            raise RuntimeError("measurement failed")
    assert not any(_running(p) for p in pids)


HANG_GUARD_S = 600
"""A hang guard, not a speed limit. A test run started as a background job of a non-interactive shell inherits
SIGINT ignored (the busy suite run here did, and its bench slept through the signal); the bench script takes Ctrl-C
back as a terminal gives it."""

_BENCH = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal, whatever this run inherited
sys.path.insert(0, sys.argv[1])
import bench_ingest
with bench_ingest.busy_loops(2):
    import os
    print(" ".join(open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()), flush=True)
    time.sleep(3600)  # ends only by the signal: a bench that ignored it would outlive the hang guard
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_loops_end_when_the_bench_is_interrupted_or_killed(sig: signal.Signals) -> None:
    bench = subprocess.Popen([sys.executable, "-c", _BENCH, str(REPO / "bench")], stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.DEVNULL)
    try:
        assert bench.stdout is not None
        pids = [int(p) for p in bench.stdout.readline().split()]
        assert len(pids) == 2 and all(_running(p) for p in pids)
        bench.send_signal(sig)  # only the bench: the loops must end by its cleanup or by themselves
        bench.wait(timeout=HANG_GUARD_S)
        assert _gone(pids)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()


@pytest.mark.parametrize(("threads", "loops", "cores", "share"),
                         [(2, 0, 2, 1.0), (2, 2, 2, 0.5), (1, 2, 2, 2 / 3), (4, 2, 2, 4 / 6 * 2 / 2), (1, 1, 2, 1.0)])
def test_fair_share_is_the_threads_share_of_the_cores_over_what_they_have_alone(
        threads: int, loops: int, cores: int, share: float) -> None:
    assert bench_ingest.fair_share(threads, loops, cores) == pytest.approx(share)


@pytest.mark.parametrize(("threads", "loops", "cores"), [(0, 2, 2), (2, -1, 2), (2, 2, 0)])
def test_fair_share_names_the_impossible_counts(threads: int, loops: int, cores: int) -> None:
    with pytest.raises(ValueError, match=f"threads={threads}, loops={loops}, cores={cores}"):
        bench_ingest.fair_share(threads, loops, cores)
