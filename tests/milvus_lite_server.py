"""milvus-lite's gRPC server in its own process on 127.0.0.1: the protocol a Milvus 2.5 server speaks, with full-text
BM25, so several ctxrag processes can share one Milvus the way a cluster's nodes do (a Milvus Lite *file* is held by
one process at a time).

`start_milvus_lite_server(folder)` is a context manager yielding ``http://127.0.0.1:PORT``; the fixture
`milvus_lite_server` wraps it per test.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

HAVE_MILVUS_LITE = all(importlib.util.find_spec(m) is not None for m in ("pymilvus", "milvus_lite"))
SKIP_REASON = "pymilvus and milvus-lite are not installed (pip install 'ctxrag[milvus]')"

_SERVER = """
import sys
import grpc

_server = grpc.server


def server_accepting_keepalive_pings(*args, options=(), **kwargs):
    # pymilvus pings every 10 s, also between calls; grpc's Python server refuses pings without data more often than
    # every 5 minutes and, after two, closes the connection ("too_many_pings"): a client idle for a while (a paused
    # writer, a busy machine) then fails its next call. A Milvus server accepts them; so does this one
    options = [*options, ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_ping_strikes", 0),
               ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000)]
    return _server(*args, options=options, **kwargs)


grpc.server = server_accepting_keepalive_pings
from milvus_lite.adapter.grpc.server import start_server_in_thread
server, db, port = start_server_in_thread(sys.argv[1], host="127.0.0.1", port=0)
print(port, flush=True)
server.wait_for_termination()
"""


@contextmanager
def start_milvus_lite_server(folder: Path) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.strip().isdigit():
            pytest.fail(f"milvus-lite server did not start (got {line!r})")
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def milvus_lite_server(tmp_path: Path) -> Iterator[str]:
    if not HAVE_MILVUS_LITE:
        pytest.skip(SKIP_REASON)
    with start_milvus_lite_server(tmp_path / "milvus-lite-server") as uri:
        yield uri
