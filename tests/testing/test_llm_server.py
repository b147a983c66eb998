"""`ctxrag.testing.llm_server.CountingProxy`: counting, and holding calls after the n-th, against a real HTTP upstream."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from ctxrag.testing.llm_server import HANG_GUARD_S, CountingProxy


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        payload = json.dumps({"echo": json.loads(body)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _post(url: str, n: int, results: list[int]) -> None:
    reply = httpx.post(f"{url}/chat/completions", json={"n": n}, timeout=HANG_GUARD_S)
    results.append(reply.json()["echo"]["n"])


def test_calls_after_the_nth_wait_for_release(upstream: str) -> None:
    with CountingProxy(upstream) as proxy:
        proxy.url.hold_after(2)
        done: list[int] = []
        _post(proxy.url, 1, done)
        _post(proxy.url, 2, done)
        third = threading.Thread(target=_post, args=(proxy.url, 3, done))
        third.start()
        third.join(timeout=1.0)  # not a speed limit: the call must still be waiting after it
        assert third.is_alive() and done == [1, 2] and proxy.count == 3
        proxy.url.release()
        third.join(timeout=HANG_GUARD_S)
        assert done == [1, 2, 3] and [r["n"] for r in proxy.url.requests] == [1, 2, 3]
        _post(proxy.url, 4, done)  # released: no longer holding
        assert done[-1] == 4


def test_a_held_call_does_not_outlive_the_proxy(upstream: str) -> None:
    proxy = CountingProxy(upstream).start()
    proxy.hold_after(0)
    done: list[int] = []
    held = threading.Thread(target=_post, args=(proxy.url, 1, done), daemon=True)
    held.start()
    while proxy.count < 1:
        held.join(timeout=0.05)
    proxy.close()  # releases the held call instead of leaving its handler thread waiting forever
    held.join(timeout=HANG_GUARD_S)
    assert not held.is_alive()


def test_hold_after_rejects_a_negative_count(upstream: str) -> None:
    with CountingProxy(upstream) as proxy, pytest.raises(ValueError, match="-1"):
        proxy.hold_after(-1)
