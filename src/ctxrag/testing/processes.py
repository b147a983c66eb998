"""Stopping a process a test or benchmark started: terminate, wait, then kill (one helper instead of a copy per
server fixture).

Example::

    import subprocess, sys
    from ctxrag.testing.processes import stop_process
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop_process(proc)          # SIGTERM, then SIGKILL after `grace` seconds; returns the exit code
"""
from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen, grace: float = 20.0) -> int:
    """Terminate `proc`, give it `grace` seconds to exit, then kill it; returns its exit code."""
    proc.terminate()
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
