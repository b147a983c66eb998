"""Writes through a running server never stall its reads (a real `ctxrag serve`, a real lock-holding process).

Before: while another process held the write lock, 7 waiting ``POST /notes/invoke`` filled the event loop's thread
pool and ``/search`` waited behind them (22 s; 10 adds: 43 s). Now adds queue on the notes writer executor."""
from __future__ import annotations

import concurrent.futures as cf
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from test_kb_concurrency import KB, _add_note, _env, _search, _seed_kb, _serve
from test_kb_delete import _LOCK_HOLDER, _wait_for
from ctxrag.testing.llm_server import HANG_GUARD_S

pytestmark = pytest.mark.slow  # real processes on one knowledge base: the full suite, not the fast lane

SEARCH_HANG_GUARD_S = 90


def test_note_adds_waiting_for_the_write_lock_never_stall_searches(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    _seed_kb(tmp_path, env)
    ready, release = tmp_path / "ready", tmp_path / "release"
    with _serve(home, env) as url, httpx.Client(limits=httpx.Limits(max_connections=32)) as client, \
            cf.ThreadPoolExecutor(12) as pool:
        assert "seed" in _search(client, url, "trapdoor")[1]
        holder = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, str(home / "kb" / KB), str(ready),
                                   str(release)], env=env)
        try:
            _wait_for(ready.exists, "write lock taken by the holder", (holder,))
            adds = [pool.submit(_add_note, client, url, f"Note {i} about the quasarbell{i}.") for i in range(10)]
            log = next(tmp_path.glob("serve-*.log"))
            _wait_for(lambda: "waiting for the write lock" in log.read_text(), "a note add waiting for the lock")
            for query in ("trapdoor", "seed", "trapdoor"):
                r = client.post(f"{url}/search/invoke", json={"input": query}, timeout=SEARCH_HANG_GUARD_S)
                assert r.status_code == 200, r.text
                assert not any(f.done() for f in adds), "the adds finished although the lock is still held"
                assert holder.poll() is None
        finally:
            release.write_text("x")
            holder.wait(timeout=60)
        assert [f.result(timeout=HANG_GUARD_S) for f in adds] == [200] * 10
        status, found = _search(client, url, "quasarbell3")
        assert status == 200 and "note://" in " ".join(found), found
