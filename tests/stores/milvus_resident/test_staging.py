"""`StagedCopy`: whole when every chunk of its marker's count arrived; its writer alive on this host while its process
runs, on another while its heartbeat is younger than the grace period."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

from ctxrag.stores.milvus_resident.staging import CHUNKS_ONLY, MARKER_INDEX, StagedCopy, marker_record, writer_here
from ctxrag.stores.milvus_resident.writers import writer_now


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def _copy(writer: dict, staged: int = 3, n_chunks: int | None = 3) -> StagedCopy:
    return StagedCopy("d1", "a.md", "w1", n_chunks, staged, writer)


def test_a_copy_is_whole_when_its_markers_count_arrived() -> None:
    assert _copy({}).whole and not _copy({}, staged=2).whole and not _copy({}, n_chunks=None).whole


def test_the_writer_is_alive_while_its_process_runs_here_however_old_its_write() -> None:
    now = time.time()
    assert _copy({**writer_here(), "started": now}).alive(now, 600.0)
    assert _copy({**writer_here(), "started": now - 6000}).alive(now, 600.0)  # a long write of a live process
    assert not _copy({"host": socket.gethostname(), "pid": _dead_pid(), "started": now}).alive(now, 600.0)
    assert not _copy({}).alive(now, 600.0)  # no marker: nothing says a writer runs


def test_another_hosts_writer_cannot_be_probed_and_lives_by_its_heartbeat() -> None:
    now = time.time()
    elsewhere = {"host": socket.gethostname() + "-other", "pid": _dead_pid(), "id": "w-b"}
    assert _copy({**elsewhere, "started": now - 10}).alive(now, 600.0)
    assert not _copy({**elsewhere, "started": now - 600}).alive(now, 600.0)
    assert _copy({**elsewhere, "started": now - 6000}).alive(now, 600.0, beats={"w-b": now - 5})


def test_describe_names_the_document_the_write_and_the_writer() -> None:
    pid = _dead_pid()
    line = _copy({"host": socket.gethostname(), "pid": pid, "started": time.time()}, staged=2).describe()
    assert line == f"a.md (doc d1): write w1, 2 of 3 chunks staged, writer pid {pid} on {socket.gethostname()} gone"


def test_a_marker_is_no_chunk() -> None:
    writer = writer_now()
    m = marker_record("d1", "a.md", 3, writer)
    assert m.chunk_index == MARKER_INDEX and CHUNKS_ONLY == f"chunk_index > {MARKER_INDEX}"
    assert m.metadata == {"source": "a.md", "n_chunks": 3, **writer} and writer["pid"] == writer_here()["pid"]
