"""`ctxrag.testing.shared_server`: one real ``llama_cpp.server`` per test run, shared by its processes.

The run's own server (``llama_server_url``) is found again, not started twice; a supervisor of its own (replay-only,
so its model never loads) is stopped by `stop_shared_servers` and, when the run's owner process dies, by itself.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS
from ctxrag.testing.reply_cache import STATS_PATH, CacheMode
from ctxrag.testing.shared_server import shared_llama_server, stop_shared_servers


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}{STATS_PATH}", timeout=5.0).status_code == 200
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


def test_a_server_stops_by_itself_when_the_runs_owner_dies(tmp_path: Path, small_model_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    loads = tmp_path / "loads.log"
    try:
        url, started = shared_llama_server(tmp_path / "run", small_model_path, n_ctx=512, owner_pid=owner.pid,
                                           cache_dir=tmp_path / "replies", cache_mode=CacheMode.REPLAY_ONLY,
                                           loads_file=loads)
        assert started and _answers(url)
        assert shared_llama_server(tmp_path / "run", small_model_path, n_ctx=512, owner_pid=owner.pid) == (url, False)
        body = {"model": SERVER_MODEL_ALIAS, "temperature": 0, "max_tokens": 4, "messages": [{"role": "user",
                                                                                             "content": "hi"}]}
        refused = httpx.post(f"{url}/chat/completions", json=body, timeout=HANG_GUARD_S)
        assert refused.status_code == 503 and "no recorded reply" in refused.text  # replay-only: nothing decodes
        assert not loads.exists()  # so the model was never loaded
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


def _stream(url: str, prompt: str, out: dict[str, tuple[str, str | None]]) -> None:
    """Stream a reply the real server decodes now (``no-cache``: the run's reply cache passes it through)."""
    body = {"model": SERVER_MODEL_ALIAS, "stream": True, "max_tokens": 24, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}
    try:
        _read_stream(url, body, out, prompt)
    except (httpx.HTTPError, ValueError, KeyError) as e:  # recorded: the assertion names what the client saw
        out[prompt] = (f"error: {e!r}", None)


def _read_stream(url: str, body: dict, out: dict[str, tuple[str, str | None]], prompt: str) -> None:
    text, finish = "", None
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=HANG_GUARD_S,
                      headers={"Cache-Control": "no-cache"}) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[6:])["choices"][0]
            text += choice.get("delta", {}).get("content") or ""
            finish = choice.get("finish_reason") or finish
    out[prompt] = (text, finish)


def test_a_streaming_reply_is_not_cut_short_by_another_clients_request(llama_server_url: str) -> None:
    """Two clients at once (as two xdist workers are): each gets a whole reply, the second waits for the first."""
    import threading

    out: dict[str, tuple[str, str | None]] = {}
    prompts = ["Count from one to twenty in English words.", "Name ten colours, comma-separated."]
    first = threading.Thread(target=_stream, args=(llama_server_url, prompts[0], out))
    first.start()
    time.sleep(1.0)  # the first reply is streaming (or queued behind another worker's request) when the second comes
    _stream(llama_server_url, prompts[1], out)
    first.join(HANG_GUARD_S)
    for p in prompts:
        text, finish = out[p]
        assert finish in ("length", "stop") and text.strip(), (p, out[p])
