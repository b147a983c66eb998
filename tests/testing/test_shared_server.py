"""`ctxrag.testing.shared_server`: one real ``llama_cpp.server`` per test run, shared by its processes.

The run's own server (``llama_server_url``) is found again, not started twice; a server of its own (the 0.5B, no
decoding) is stopped by `stop_shared_servers` and, when the run's owner process dies, by its supervisor alone.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from ctxrag.testing.llm_server import HANG_GUARD_S
from ctxrag.testing.shared_server import shared_llama_server, stop_shared_servers


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/models", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        return False


def _gone(url: str) -> bool:
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard: the supervisor checks its owner every second
    while _answers(url):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_the_runs_server_is_found_again_not_started_twice(llama_server_url: str, local_model_path: Path) -> None:
    run_dir = Path(os.environ["CTXRAG_TEST_RUN_DIR"])
    url, started = shared_llama_server(run_dir, local_model_path, n_ctx=int(os.environ.get("CTXRAG_TEST_LLM_N_CTX",
                                                                                          "4096")),
                                       owner_pid=int(os.environ["CTXRAG_TEST_RUN_OWNER"]))
    assert (url, started) == (llama_server_url, False)
    states = [json.loads(p.read_text(encoding="utf-8")) for p in run_dir.glob("llama-server-*.json")]
    assert [s["url"] for s in states if s["url"] == url] == [url]


def test_a_server_stops_by_itself_when_the_runs_owner_dies(tmp_path: Path, small_model_path: Path,
                                                           record_load: Callable[[str], None]) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        url, started = shared_llama_server(tmp_path / "run", small_model_path, n_ctx=512, owner_pid=owner.pid)
        record_load(f"{small_model_path.name} in llama_cpp.server at {url} (this test's own, no decoding)")
        assert started and _answers(url)
        assert shared_llama_server(tmp_path / "run", small_model_path, n_ctx=512, owner_pid=owner.pid) == (url, False)
    finally:
        owner.kill()
        owner.wait()
    assert _gone(url)  # the owner (the run's controller) is gone: the supervisor stopped the server by itself
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard: it forgets the server right after stopping it
    while list((tmp_path / "run").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not list((tmp_path / "run").glob("*.json"))


def test_stop_ends_every_server_of_the_run_and_forgets_it(tmp_path: Path) -> None:
    """`stop_shared_servers` (what the controller calls at the end) on a stand-in supervisor: a real process."""
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    state = tmp_path / "llama-server-abc.json"
    state.write_text(json.dumps({"url": "http://127.0.0.1:9/v1", "pid": stand_in.pid}), encoding="utf-8")
    assert stop_shared_servers(tmp_path) == ["http://127.0.0.1:9/v1"]
    with pytest.raises(ProcessLookupError):  # terminated and reaped
        os.kill(stand_in.pid, 0)
    assert not state.exists()
