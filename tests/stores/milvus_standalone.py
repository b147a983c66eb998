"""A real Milvus standalone server (the engine a Milvus cluster runs) on 127.0.0.1, from PyPI's `milvus` package
("embedded Milvus" 2.3.x: its wheel holds the Milvus 2.3 standalone binary with embedded etcd and local storage).

Tests marked ``milvus_server`` use the session fixture `milvus_standalone` (the server's ``http://127.0.0.1:PORT``);
they skip cleanly when the package is not installed (``pip install milvus``), or when another embedded Milvus holds
etcd's fixed peer port 2380 (one per machine). Milvus 2.3 has no sparse vectors, so collections there are dense only
and hybrid search uses ctxrag's BM25. A session killed with SIGKILL/SIGTERM leaves its server running (kill it).
"""
from __future__ import annotations

import importlib.util
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxrag.testing.llm_server import HANG_GUARD_S

HAVE_MILVUS_STANDALONE = all(importlib.util.find_spec(m) is not None for m in ("milvus", "pymilvus"))
ETCD_PEER_PORT = 2380
SKIP_REASON = "the `milvus` package (embedded Milvus standalone 2.3) is not installed: pip install milvus"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def milvus_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start a Milvus standalone server for the session; yields its URI; stops it and removes its data after."""
    if not HAVE_MILVUS_STANDALONE:
        pytest.skip(SKIP_REASON)
    from milvus import MilvusServer, MilvusServerConfig

    with socket.socket() as probe:  # embedded etcd's peer port is fixed: one embedded Milvus per machine
        try:
            probe.bind(("127.0.0.1", ETCD_PEER_PORT))
        except OSError:
            pytest.skip(f"port {ETCD_PEER_PORT} (embedded etcd's fixed peer port) is taken: another embedded Milvus "
                        "runs on this machine (a leftover server of a killed test session?)")
    data = Path(tmp_path_factory.mktemp("milvus-standalone"))
    server = MilvusServer(MilvusServerConfig(), wait_for_started=False)
    server.set_base_dir(str(data))
    server.listen_port = _free_port()  # never the default 19530: other sessions on this machine may hold it
    started = time.monotonic()
    server.start()
    try:
        server.wait_started(timeout=int(HANG_GUARD_S * 1000))  # milliseconds; a hang guard
    except (TimeoutError, RuntimeError) as e:
        server.stop()
        logs = data / "logs" / "milvus-stderr.log"
        tail = logs.read_text(errors="replace")[-2000:] if logs.exists() else ""
        pytest.fail(f"Milvus standalone did not start in {time.monotonic() - started:.0f} s ({e}); stderr tail:\n{tail}")
    try:
        yield f"http://127.0.0.1:{server.listen_port}"
    finally:
        server.stop()
