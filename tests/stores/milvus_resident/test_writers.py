"""Writers of a Milvus-resident document: on this host alive while their process runs, whatever the write's age; on
another while their heartbeat is younger than the grace period; a ``writing`` documents row names one in its
metadata, no other row does; `Heartbeat` beats while a write runs and ends with it."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

from ctxrag.stores.documents.docstore import DocumentRecord
from ctxrag.stores.milvus_resident import collections as cols
from ctxrag.stores.milvus_resident.writers import (Heartbeat, describe_writer, process_start, writer_alive,
                                                   writer_here, writer_now)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_a_writer_on_this_host_is_alive_while_its_process_runs_however_old_its_write() -> None:
    now = time.time()
    assert writer_alive(writer_now(), now, 600.0)
    assert writer_here()["proc"] == process_start(writer_here()["pid"]) is not None
    assert writer_alive({**writer_now(), "started": now - 6000}, now, 600.0)  # a long write of a live process
    dead = {"host": socket.gethostname(), "pid": _dead_pid(), "proc": "1", "started": now}
    assert not writer_alive(dead, now, 600.0)
    reused = {**writer_now(), "proc": str(int(writer_here()["proc"]) + 1)}  # this pid, another process's start
    assert not writer_alive(reused, now, 600.0)
    older = {k: v for k, v in writer_now().items() if k != "proc"}  # a record from before `proc`: the old rule
    assert writer_alive(older, now, 600.0) and not writer_alive({**older, "started": now - 601}, now, 600.0)
    assert not writer_alive(None) and not writer_alive({})  # nothing names a writer: an older version's row
    assert describe_writer(dead, now, 600.0) == f"pid {dead['pid']} on {socket.gethostname()} gone"
    assert describe_writer(None) == "an unknown writer gone"


def test_another_hosts_writer_is_alive_while_its_heartbeat_is_younger_than_the_grace_period() -> None:
    now = time.time()
    elsewhere = {**writer_now(), "host": socket.gethostname() + "-other", "pid": _dead_pid(), "started": now - 6000}
    assert not writer_alive(elsewhere, now, 600.0)  # no heartbeat: its start is its last sign of life
    assert writer_alive(elsewhere, now, 600.0, beats={elsewhere["id"]: now - 10})
    assert not writer_alive(elsewhere, now, 600.0, beats={elsewhere["id"]: now - 600})
    assert not writer_alive(elsewhere, now, 600.0, beats={"another-writer": now})
    assert writer_alive({**elsewhere, "started": now - 10}, now, 600.0)  # just started, no beat read yet
    assert describe_writer(elsewhere, now, 600.0, {elsewhere["id"]: now - 10}) == \
        f"pid {elsewhere['pid']} on {elsewhere['host']} running (last heartbeat 10 s ago, grace 600 s)"


def test_a_heartbeat_beats_at_once_and_again_while_the_write_runs_and_ends_with_it() -> None:
    beats: list[float] = []
    ended: list[str] = []
    writer = writer_now()
    with Heartbeat(writer, lambda w, at: beats.append(at), lambda w: ended.append(w["id"]), 0.01) as me:
        assert me is writer and len(beats) == 1 and not ended  # the first beat before the write starts
        while len(beats) < 3:
            time.sleep(0.01)
    assert ended == [writer["id"]] and beats == sorted(beats)
    n = len(beats)
    time.sleep(0.05)
    assert len(beats) == n  # no beat after the write ended


def test_a_failing_beat_does_not_stop_the_write_or_the_next_beats() -> None:
    calls: list[float] = []

    def flaky(writer: dict, at: float) -> None:
        calls.append(at)
        raise ConnectionError("server away")

    with Heartbeat(writer_now(), flaky, lambda w: None, 0.01):
        while len(calls) < 2:
            time.sleep(0.01)
    try:
        Heartbeat(writer_now(), flaky, lambda w: None, 0.0)
    except ValueError as e:
        assert "0.0" in str(e)
    else:
        raise AssertionError("a zero interval was accepted")


def test_only_a_writing_row_names_its_writer() -> None:
    doc = DocumentRecord("d1", "a.md", "a", "h", "text", 1, {"lang": "en"})
    me = writer_now()
    row = cols.document_row(doc, n_chunks=1, status=cols.STATUS_WRITING, write_id="w", added_at=0.0, updated_at=0.0,
                            writer=me)
    assert cols.row_writer(row) == me and row["metadata"] == {"lang": "en", cols.ROW_WRITER: me}
    assert doc.metadata == {"lang": "en"}  # the document's own metadata is not changed
    done = cols.document_row(doc, n_chunks=1, status=cols.STATUS_OK, write_id="w", added_at=0.0, updated_at=0.0,
                             writer=me)
    assert done["metadata"] == {"lang": "en"} and cols.row_writer(done) is None
    assert cols.row_writer({**row, "status": cols.STATUS_SWAPPING}) is None
    assert cols.row_writer({**row, "metadata": {"lang": "en"}}) is None  # written before writers were named
    assert cols.with_writer(row["metadata"], None) == {"lang": "en"}
