"""`ctxrag.testing.reply_cache`: the caching proxy in front of the test model.

The fast tests put the proxy in front of a small real HTTP server on 127.0.0.1 that counts what reaches it (a
stand-in for the model server: these check the proxy's own mechanics, concurrency, modes and pruning). The ``llm``
tests put a fresh proxy (an empty cache in ``tmp_path``) in front of the run's real ``llama_cpp.server``
(``llama_server_url``) and talk to it with real clients (httpx, LangChain's ChatOpenAI).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS
from ctxrag.testing.reply_cache import (
    STATS_PATH,
    CacheMode,
    CachingProxy,
    ReplyCache,
    is_deterministic,
    model_sha256,
    read_used,
    request_key,
    sse_events,
)

SHA = "0" * 64
BODY = {"model": SERVER_MODEL_ALIAS, "temperature": 0, "max_tokens": 8,
        "messages": [{"role": "user", "content": "Name one colour."}]}


# --------------------------------------------------------------------------------------------- keys and rules


def test_the_key_changes_when_any_request_field_changes() -> None:
    base = request_key(SHA, 4096, "/v1/chat/completions", BODY)
    changed = [
        request_key("1" * 64, 4096, "/v1/chat/completions", BODY),  # another model file
        request_key(SHA, 2048, "/v1/chat/completions", BODY),
        request_key(SHA, 4096, "/v1/completions", BODY),
        request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "max_tokens": 9}),
        request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "stream": True}),
        request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "logprobs": True}),
        request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "stop": ["\n"]}),
        request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "grammar": "root ::= \"a\""}),
        request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "response_format": {"type": "json_object"}}),
        request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "messages": [{"role": "user", "content": "Name one."}]}),
        request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "seed": 7}),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    reordered = dict(reversed(list(BODY.items())))
    assert request_key(SHA, 4096, "/v1/chat/completions", reordered) == base  # field order is not a change


def test_checkout_and_pytest_temporary_paths_key_as_placeholders() -> None:
    def asking(path: str) -> dict:
        return {**BODY, "messages": [{"role": "user", "content": f"Summarise {path}/notes.md"}]}

    aliases = {"/work/clone-a": "<repo>"}
    here = request_key(SHA, 4096, "/v1/chat/completions", asking("/work/clone-a/docs"), aliases)
    assert request_key(SHA, 4096, "/v1/chat/completions", asking("/ci/build/docs"), {"/ci/build": "<repo>"}) == here
    assert request_key(SHA, 4096, "/v1/chat/completions", asking("/work/clone-a/src"), aliases) != here
    tmp = tempfile.gettempdir()
    run_a = request_key(SHA, 4096, "/v1/chat/completions", asking(f"{tmp}/pytest-of-ann/pytest-7/popen-gw1/test_x0"))
    run_b = request_key(SHA, 4096, "/v1/chat/completions", asking(f"{tmp}/pytest-of-ci/pytest-212/test_x0"))
    other = request_key(SHA, 4096, "/v1/chat/completions", asking(f"{tmp}/pytest-of-ci/pytest-212/test_y0"))
    assert run_a == run_b != other


@pytest.mark.parametrize(("body", "expected"), [
    ({"temperature": 0}, True), ({"temperature": 0.0}, True), ({"temperature": 0.7, "seed": 3}, True),
    ({"seed": 0}, True), ({}, False), ({"temperature": 0.7}, False), ({"temperature": None}, False),
    ({"temperature": False}, False), ({"temperature": 0, "seed": None}, True), (None, False), ([1], False),
])
def test_only_greedy_or_seeded_requests_are_deterministic(body: Any, expected: bool) -> None:
    assert is_deterministic(body) is expected


def test_sse_events_split_on_blank_lines_and_join_back() -> None:
    body = "data: {\"a\": 1}\r\n\r\ndata: {\"b\": 2}\r\n\r\n: ping\n\ndata: [DONE]\r\n\r\n"
    events = sse_events(body)
    assert events == ["data: {\"a\": 1}\r\n\r\n", "data: {\"b\": 2}\r\n\r\n", ": ping\n\n", "data: [DONE]\r\n\r\n"]
    assert "".join(events) == body


def test_an_unknown_mode_is_refused_by_name() -> None:
    assert CacheMode.from_str(None) is CacheMode.ON and CacheMode.from_str("Replay-Only") is CacheMode.REPLAY_ONLY
    with pytest.raises(ValueError, match="'sometimes'"):
        CacheMode.from_str("sometimes")


def test_model_sha_comes_from_the_assembly_sidecar_only_while_it_matches(tmp_path: Path) -> None:
    import hashlib

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"weights")
    real = hashlib.sha256(b"weights").hexdigest()
    assert model_sha256(gguf) == real  # no sidecar: read from the file
    st = gguf.stat()
    sidecar = tmp_path / "m.gguf.sha256"
    sidecar.write_text(json.dumps({"sha256": "f" * 64, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    assert model_sha256(gguf) == "f" * 64
    sidecar.write_text(json.dumps({"sha256": "f" * 64, "size": st.st_size + 1, "mtime_ns": st.st_mtime_ns}))
    assert model_sha256(gguf) == real  # a stale sidecar is not trusted


# --------------------------------------------------------------------------------------------- a stand-in upstream


class _Upstream:
    """A real HTTP server on 127.0.0.1 that answers completions with a counter in the reply (JSON or SSE)."""

    def __init__(self, *, cut_stream: bool = False, delay: threading.Event | None = None) -> None:
        self.calls = 0
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status = int(body.get("status", 200))  # the status a test asks for
                with upstream._lock:
                    upstream.calls += 1
                    n = upstream.calls
                if delay is not None:
                    delay.wait(HANG_GUARD_S)
                if body.get("stream"):
                    events = [f"data: {json.dumps({'n': n, 'part': i, 'text': '颜色'})}\r\n\r\n" for i in range(3)]
                    events += [] if cut_stream else ["data: [DONE]\r\n\r\n"]
                    payload = "".join(events).encode()
                    ctype = "text/event-stream; charset=utf-8"
                elif body.get("reject"):  # what llama_cpp.server answers for a request its pydantic schema rejects
                    payload = json.dumps({"error": {"message": f"1 validation error: n={n}"}}).encode()
                    ctype = "application/json"
                else:
                    payload = json.dumps({"n": n, "text": "颜色"}, ensure_ascii=False).encode()
                    ctype = "application/json"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    yield server
    server.close()


def _proxy(upstream: _Upstream, tmp_path: Path, mode: CacheMode = CacheMode.ON) -> CachingProxy:
    return CachingProxy(upstream.url, cache_dir=tmp_path / "replies", model_sha256=SHA, mode=mode,
                        used_log=tmp_path / "used.log")


def test_a_miss_is_recorded_and_a_hit_replays_it_byte_for_byte(upstream: _Upstream, tmp_path: Path) -> None:
    with _proxy(upstream, tmp_path) as proxy:
        first = httpx.post(f"{proxy.url}/chat/completions", json=BODY)
        second = httpx.post(f"{proxy.url}/chat/completions", json=BODY)
        stats = httpx.get(f"{proxy.url}{STATS_PATH}").json()
    assert first.status_code == second.status_code == 200
    assert first.content == second.content and first.json()["n"] == 1 and upstream.calls == 1
    assert second.headers["content-type"] == "application/json"
    assert stats == {"mode": "on", "hits": 1, "misses": 1, "passed": 0}
    key = request_key(SHA, 4096, "/v1/chat/completions", BODY)
    assert read_used([tmp_path / "used.log"]) == {"hit": {key}, "miss": {key}}
    entry = ReplyCache(tmp_path / "replies").get(key)
    assert entry is not None and entry["request"] == BODY and entry["body"].encode() == first.content


def test_a_refusal_is_replayed_and_a_server_error_is_not_recorded(upstream: _Upstream, tmp_path: Path) -> None:
    with _proxy(upstream, tmp_path) as proxy:
        refusals = [httpx.post(f"{proxy.url}/chat/completions", json={**BODY, "status": 422}) for _ in range(2)]
        errors = [httpx.post(f"{proxy.url}/chat/completions", json={**BODY, "status": 500}) for _ in range(2)]
        rejected = [httpx.post(f"{proxy.url}/chat/completions", json={**BODY, "status": 500, "reject": True})
                    for _ in range(2)]
    assert [r.status_code for r in refusals] == [422, 422] and refusals[0].content == refusals[1].content
    assert [r.status_code for r in errors] == [500, 500] and [r.json()["n"] for r in errors] == [2, 3]
    # llama_cpp.server's HTTP 500 for a request its schema rejects is the request's own answer: replayed
    assert [r.status_code for r in rejected] == [500, 500] and rejected[0].content == rejected[1].content
    assert upstream.calls == 4 and len(ReplyCache(tmp_path / "replies").keys()) == 2


def test_a_stream_is_replayed_as_the_same_events(upstream: _Upstream, tmp_path: Path) -> None:
    body = {**BODY, "stream": True}
    with _proxy(upstream, tmp_path) as proxy:
        live = httpx.post(f"{proxy.url}/chat/completions", json=body)
        replayed = httpx.post(f"{proxy.url}/chat/completions", json=body)
    assert upstream.calls == 1 and live.content == replayed.content and b"data: [DONE]" in replayed.content
    assert replayed.headers["content-type"].startswith("text/event-stream")
    entry = ReplyCache(tmp_path / "replies").get(request_key(SHA, 4096, "/v1/chat/completions", body))
    assert entry is not None and len(entry["events"]) == 4


def test_a_stream_cut_short_is_not_recorded(tmp_path: Path) -> None:
    cut = _Upstream(cut_stream=True)
    try:
        with _proxy(cut, tmp_path) as proxy:
            for _ in range(2):
                assert b"part" in httpx.post(f"{proxy.url}/chat/completions", json={**BODY, "stream": True}).content
    finally:
        cut.close()
    assert cut.calls == 2 and not ReplyCache(tmp_path / "replies").keys()


@pytest.mark.parametrize("change", [{"temperature": 0.7}, {"temperature": None}])
def test_sampled_requests_pass_through_every_time(upstream: _Upstream, tmp_path: Path, change: dict) -> None:
    body = {k: v for k, v in {**BODY, **change}.items() if v is not None}
    with _proxy(upstream, tmp_path) as proxy:
        replies = [httpx.post(f"{proxy.url}/chat/completions", json=body).json()["n"] for _ in range(2)]
        assert proxy.stats()["passed"] == 2
    assert replies == [1, 2] and not ReplyCache(tmp_path / "replies").keys()


def test_no_cache_from_the_client_reaches_the_server(upstream: _Upstream, tmp_path: Path) -> None:
    with _proxy(upstream, tmp_path) as proxy:
        httpx.post(f"{proxy.url}/chat/completions", json=BODY)
        again = httpx.post(f"{proxy.url}/chat/completions", json=BODY, headers={"Cache-Control": "no-cache"})
    assert again.json()["n"] == 2


def test_modes_record_replay_only_and_off(upstream: _Upstream, tmp_path: Path) -> None:
    with _proxy(upstream, tmp_path, CacheMode.REPLAY_ONLY) as proxy:
        refused = httpx.post(f"{proxy.url}/chat/completions", json=BODY)
    assert refused.status_code == 503 and request_key(SHA, 4096, "/v1/chat/completions", BODY) in refused.text
    assert upstream.calls == 0
    with _proxy(upstream, tmp_path) as proxy:
        assert httpx.post(f"{proxy.url}/chat/completions", json=BODY).json()["n"] == 1
    with _proxy(upstream, tmp_path, CacheMode.REPLAY_ONLY) as proxy:
        assert httpx.post(f"{proxy.url}/chat/completions", json=BODY).json()["n"] == 1  # recorded: replayed
    with _proxy(upstream, tmp_path, CacheMode.RECORD) as proxy:
        assert httpx.post(f"{proxy.url}/chat/completions", json=BODY).json()["n"] == 2  # decoded again, overwritten
    with _proxy(upstream, tmp_path) as proxy:
        assert httpx.post(f"{proxy.url}/chat/completions", json=BODY).json()["n"] == 2
    with _proxy(upstream, tmp_path, CacheMode.OFF) as proxy:
        assert httpx.post(f"{proxy.url}/chat/completions", json=BODY).json()["n"] == 3
    assert upstream.calls == 3


def test_two_clients_asking_the_same_at_once_decode_it_once(tmp_path: Path) -> None:
    release = threading.Event()
    slow = _Upstream(delay=release)
    try:
        with _proxy(slow, tmp_path) as proxy:
            replies: list[bytes] = []
            clients = [threading.Thread(target=lambda: replies.append(
                httpx.post(f"{proxy.url}/chat/completions", json=BODY, timeout=HANG_GUARD_S).content))
                for _ in range(2)]
            for c in clients:
                c.start()
            while slow.calls == 0:  # the first request reached the server and is held there
                threading.Event().wait(0.05)
            release.set()
            for c in clients:
                c.join(HANG_GUARD_S)
            assert proxy.stats() == {"mode": "on", "hits": 1, "misses": 1, "passed": 0}
    finally:
        slow.close()
    assert slow.calls == 1 and len(replies) == 2 and replies[0] == replies[1]


def test_the_upstream_starts_only_when_a_request_needs_it(upstream: _Upstream, tmp_path: Path) -> None:
    starts: list[str] = []

    def start() -> str:
        starts.append(upstream.url)
        return upstream.url

    with _proxy(upstream, tmp_path) as proxy:
        httpx.post(f"{proxy.url}/chat/completions", json=BODY)  # recorded
    with CachingProxy(start, cache_dir=tmp_path / "replies", model_sha256=SHA) as proxy:
        httpx.get(f"{proxy.url}{STATS_PATH}")
        httpx.post(f"{proxy.url}/chat/completions", json=BODY)
        assert starts == []  # a replayed run never starts the model server
        httpx.post(f"{proxy.url}/chat/completions", json={**BODY, "max_tokens": 3})
        assert starts == [upstream.url]


def test_prune_removes_what_no_run_used(upstream: _Upstream, tmp_path: Path) -> None:
    with _proxy(upstream, tmp_path) as proxy:
        for n in (1, 2, 3):
            httpx.post(f"{proxy.url}/chat/completions", json={**BODY, "max_tokens": n})
    used = tmp_path / "used-now.log"
    with _proxy(upstream, tmp_path) as proxy:
        proxy.used_log = used
        httpx.post(f"{proxy.url}/chat/completions", json={**BODY, "max_tokens": 2})
    keep = request_key(SHA, 4096, "/v1/chat/completions", {**BODY, "max_tokens": 2})
    cmd = [sys.executable, "-m", "ctxrag.testing.reply_cache", "prune", str(tmp_path / "replies"), "--used", str(used)]
    dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, check=True)
    assert "would remove 2 of 3" in dry.stdout and len(ReplyCache(tmp_path / "replies").keys()) == 3
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "removed 2 of 3" in done.stdout and ReplyCache(tmp_path / "replies").keys() == {keep}
    missing = subprocess.run([*cmd[:-1], str(tmp_path / "nope.log")], capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.log" in missing.stderr


# --------------------------------------------------------------------------------------------- the real model


@pytest.fixture
def real_proxy(llama_server_url: str, local_model_path: Path, tmp_path: Path) -> Iterator[CachingProxy]:
    """A fresh proxy with an empty cache in front of the run's real server (itself behind the run's cache)."""
    with CachingProxy(llama_server_url, cache_dir=tmp_path / "replies", model_sha256=model_sha256(local_model_path),
                      used_log=tmp_path / "used.log") as proxy:
        yield proxy


def test_real_model_miss_then_hit_gives_the_same_reply(real_proxy: CachingProxy) -> None:
    body = {**BODY, "logprobs": True, "top_logprobs": 2}
    first = httpx.post(f"{real_proxy.url}/chat/completions", json=body, timeout=HANG_GUARD_S)
    second = httpx.post(f"{real_proxy.url}/chat/completions", json=body, timeout=HANG_GUARD_S)
    assert first.status_code == 200 and first.json()["choices"][0]["message"]["content"].strip()
    assert first.json()["choices"][0]["logprobs"]["content"]
    assert second.content == first.content
    assert real_proxy.stats() == {"mode": "on", "hits": 1, "misses": 1, "passed": 0}


def test_real_model_stream_is_replayed_to_langchain_as_the_same_chunks(real_proxy: CachingProxy) -> None:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=real_proxy.url, api_key="unused", model=SERVER_MODEL_ALIAS, temperature=0,
                      max_tokens=12, timeout=HANG_GUARD_S, max_retries=0)
    live = [c.content for c in chat.stream("Count from one to five in words.")]
    replayed = [c.content for c in chat.stream("Count from one to five in words.")]
    assert real_proxy.stats()["hits"] == 1 and real_proxy.stats()["misses"] == 1
    assert len([c for c in live if c]) > 1 and replayed == live  # the same events, not one merged chunk


def test_real_model_sampled_request_passes_through(real_proxy: CachingProxy) -> None:
    body = {**BODY, "temperature": 0.9, "max_tokens": 4}
    for _ in range(2):
        reply = httpx.post(f"{real_proxy.url}/chat/completions", json=body, timeout=HANG_GUARD_S)
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] is not None
    assert real_proxy.stats() == {"mode": "on", "hits": 0, "misses": 0, "passed": 2}
    assert not real_proxy.cache.keys()
