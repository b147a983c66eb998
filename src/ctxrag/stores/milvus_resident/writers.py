"""Who writes a Milvus-resident document, and whether that writer still runs.

A write that another process may find half done names its writer: the host, the pid and when it started. A replace
names it in the marker of its staged copy (`ctxrag.stores.milvus_resident.staging`); a new document, which has no
staged copy, in its documents row while the row says ``writing`` (`collections.ROW_WRITER`, removed when the row
says ``ok``). ``kb check`` and ``kb repair`` leave the write of a live writer alone and settle a dead one's.

A writer is alive while its write is younger than the grace period a write gets everywhere in the store
(``RECONCILE_GRACE_S``) and, on the host that wrote it, its pid still runs (``kill -9`` ends the pid at once, so a
killed writer is dead without waiting; another host's process cannot be probed and has the grace period). A write
naming no writer (one from a version before writers were named) is alive for no one: it is settled as before.

Example::

    from ctxrag.stores.milvus_resident.writers import writer_alive, writer_now
    writer_alive(writer_now(), grace_s=600.0)      # True: this process
    writer_alive({}, grace_s=600.0)                # False: nothing names a writer
"""
from __future__ import annotations

import os
import socket
import time
from typing import Any


def writer_here() -> dict[str, Any]:
    """This process as a writer: host and pid."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def writer_now() -> dict[str, Any]:
    """This process as the writer of a write starting now: host, pid and started (epoch seconds)."""
    return {**writer_here(), "started": time.time()}


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True


def writer_alive(writer: dict[str, Any] | None, now: float | None = None, grace_s: float = 600.0) -> bool:
    """Whether `writer` (host, pid, started) may still be writing (the module docstring's rule)."""
    started = (writer or {}).get("started")
    if writer is None or started is None or (now if now is not None else time.time()) - float(started) >= grace_s:
        return False
    if writer.get("host") != socket.gethostname():
        return True
    pid = int(writer.get("pid", -1))
    return pid == os.getpid() or (pid > 0 and _pid_runs(pid))


def describe_writer(writer: dict[str, Any] | None, now: float | None = None, grace_s: float = 600.0) -> str:
    """``pid 4242 on host running`` (or ``gone``); ``an unknown writer gone`` when nothing names one."""
    who = f"pid {writer.get('pid')} on {writer.get('host')}" if writer else "an unknown writer"
    return f"{who} {'running' if writer_alive(writer, now, grace_s) else 'gone'}"
