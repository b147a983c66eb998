"""Who writes a Milvus-resident document, whether that writer still runs, and the heartbeat that says so across hosts.

A write that another process may find half done names its writer: the host, the pid, the process's start time
(``proc``, so a pid the system gave to another process later is not taken for the writer), when the write started
and a writer id. A replace names it in the marker of its staged copy (`ctxrag.stores.milvus_resident.staging`); a new
document, which has no staged copy, in its documents row while the row says ``writing`` (`collections.ROW_WRITER`,
removed when the row says ``ok``). ``kb check`` and ``kb repair`` leave the write of a live writer alone and settle
a dead one's.

Whether a writer is alive, however long its write has run (a bulk ``ctxrag import`` batch may take longer than any
fixed limit):

- on the host that wrote it, while its pid runs and is the same process (``kill -9`` ends the pid at once, so a
  killed writer is dead without waiting). A record without ``proc`` (written by an older version) cannot rule out
  a reused pid, so it also needs to be younger than the grace period, as before;
- on another host, whose processes cannot be probed, while its last heartbeat is younger than the grace period: a
  writer refreshes its heartbeat (`Heartbeat`, every grace period divided by `BEATS_PER_GRACE`) for as long as the
  write runs, so only a writer that stopped beating (killed, or its host gone) ages out. Without a heartbeat, the
  time the write started counts as its last one.

A write naming no writer (one from a version before writers were named) is alive for no one: it is settled as before.
The grace period is ``Settings.milvus_writer_grace_s`` (``CTXRAG_MILVUS_WRITER_GRACE_S``).

Example::

    from ctxrag.stores.milvus_resident.writers import writer_alive, writer_now
    writer_alive(writer_now(), grace_s=600.0)                           # True: this process
    writer_alive({}, grace_s=600.0)                                     # False: nothing names a writer
    elsewhere = {**writer_now(), "host": "node-b", "started": 0.0}
    writer_alive(elsewhere, now=1000.0, grace_s=600.0)                  # False: no heartbeat since it started
    writer_alive(elsewhere, now=1000.0, grace_s=600.0, beats={elsewhere["id"]: 990.0})   # True: it beats
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)

WRITER_KEYS = ("host", "pid", "proc", "started", "id")
"""What a writer record holds (a staging marker's metadata carries these beside its own keys)."""
BEATS_PER_GRACE = 4
"""A writer refreshes its heartbeat this many times per grace period, so a late beat or two does not age it out."""


def process_start(pid: int) -> str | None:
    """When process `pid` started, as the kernel counts it (``/proc/PID/stat``); None where that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None  # starttime, as proc(5) numbers the fields


def writer_here() -> dict[str, Any]:
    """This process as a writer: host, pid and (where the system says) the process's start time."""
    me = {"host": socket.gethostname(), "pid": os.getpid()}
    proc = process_start(os.getpid())
    return {**me, "proc": proc} if proc is not None else me


def writer_now() -> dict[str, Any]:
    """This process as the writer of a write starting now: host, pid, proc, started (epoch seconds) and a new id."""
    return {**writer_here(), "started": time.time(), "id": uuid.uuid4().hex}


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True


def last_beat(writer: dict[str, Any], beats: Mapping[str, float] | None = None) -> float:
    """The writer's last sign of life: its newest heartbeat in `beats` (writer id -> epoch seconds), else when its
    write started."""
    beat = (beats or {}).get(str(writer.get("id", "")))
    return max(float(writer["started"]), float(beat)) if beat is not None else float(writer["started"])


def writer_alive(writer: dict[str, Any] | None, now: float | None = None, grace_s: float = 600.0,
                 beats: Mapping[str, float] | None = None) -> bool:
    """Whether `writer` may still be writing (the module docstring's rule); `beats`: writer id -> last heartbeat."""
    if not writer or writer.get("started") is None:
        return False
    now = now if now is not None else time.time()
    if writer.get("host") != socket.gethostname():
        return now - last_beat(writer, beats) < grace_s
    pid = int(writer.get("pid", -1))
    if pid <= 0 or not _pid_runs(pid):
        return False
    if writer.get("proc") is None:  # an older record: the pid may have been reused since
        return now - float(writer["started"]) < grace_s
    running = process_start(pid)
    return running is None or running == str(writer["proc"])


def describe_writer(writer: dict[str, Any] | None, now: float | None = None, grace_s: float = 600.0,
                    beats: Mapping[str, float] | None = None) -> str:
    """``pid 4242 on host running`` (or ``gone``), with the last heartbeat's age for another host's writer;
    ``an unknown writer gone`` when nothing names one."""
    if not writer:
        return "an unknown writer gone"
    state = "running" if writer_alive(writer, now, grace_s, beats) else "gone"
    who = f"pid {writer.get('pid')} on {writer.get('host')} {state}"
    if writer.get("host") == socket.gethostname() or writer.get("started") is None:
        return who
    age = (now if now is not None else time.time()) - last_beat(writer, beats)
    return f"{who} (last heartbeat {age:.0f} s ago, grace {grace_s:.0f} s)"


class Heartbeat:
    """While a write runs, calls ``beat(writer, now)`` at once and then every `interval_s` on a daemon thread, and
    ``end(writer)`` when the write is over (a killed writer never ends: its last beat ages out). A failing beat is
    logged and tried again at the next one; the write goes on.

    Example::

        beats = {}
        with Heartbeat(writer_now(), lambda w, t: beats.update({w["id"]: t}), lambda w: beats.pop(w["id"]), 1.0):
            ...   # the write; `beats` says this writer is alive
    """

    def __init__(self, writer: dict[str, Any], beat: Callable[[dict[str, Any], float], None],
                 end: Callable[[dict[str, Any]], None], interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"heartbeat interval must be positive, got {interval_s!r}")
        self.writer = writer
        self._beat, self._end, self.interval_s = beat, end, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ctxrag-heartbeat-{writer.get('id')}", daemon=True)

    def _once(self) -> None:
        try:
            self._beat(self.writer, time.time())
        except Exception as e:  # noqa: BLE001 - a server blip: the next beat tries again
            log.warning("writer heartbeat failed (%s); trying again in %.1f s", type(e).__name__, self.interval_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._once()

    def __enter__(self) -> dict[str, Any]:
        self._once()
        self._thread.start()
        return self.writer

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self._end(self.writer)
        except Exception as e:  # noqa: BLE001 - a leftover heartbeat ages out, and `kb repair` removes it
            log.warning("could not remove the writer heartbeat (%s)", type(e).__name__)
