"""Real OpenAI-compatible servers on 127.0.0.1 for tests: ``llama_cpp.server`` with the local GGUF, and a counting proxy.

Example::

    with run_llama_server(gguf_path) as base_url:          # "http://127.0.0.1:PORT/v1"
        with CountingProxy(base_url) as proxy:
            ChatOpenAI(base_url=proxy.url, api_key="x", model="m").invoke("hi")
            assert proxy.count == 1                          # POSTs to /v1/chat/completions seen
"""
from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import httpx

from ctxrag.testing.processes import stop_process

SERVER_MODEL_ALIAS = "qwen2.5-coder-1.5b-instruct"
HANG_GUARD_S = 1200.0
"""Seconds after which a request to the test model counts as hung, not slow: about ten times the slowest request of
the test suite on an idle machine, so a busy machine never trips it. Tests give it to every chat client."""


@functools.lru_cache(maxsize=1)
def models_cache_dir() -> Path:
    """Where tests keep the assembled GGUF across runs: the product's shared models cache (``$CTXRAG_MODELS_CACHE`` or
    ``~/.cache/ctxrag/models``, `ctxrag.settings.Settings.models_cache`), read once when the tests start (conftest
    calls it at import), so a test that points ``CTXRAG_MODELS_CACHE`` elsewhere does not move the real models."""
    from ctxrag.settings import Settings

    return Settings().models_dir


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:]
    except OSError:
        return "(no log)"


@contextmanager
def run_llama_server(
    model_path: str | Path,
    port: int | None = None,
    *,
    n_ctx: int = 4096,
    n_threads: int | None = None,
    startup_timeout: float = 600.0,
    log_path: Path | None = None,
) -> Iterator[str]:
    """Run ``python -m llama_cpp.server`` on 127.0.0.1 for the block; yield its base URL ``http://127.0.0.1:PORT/v1``.

    The chat format comes from the GGUF's own template. The server keeps ``logits_all`` (its default), so chat
    completions answer ``logprobs``/``top_logprobs``. The process is terminated (then killed) on exit. Its output
    (verbose: each request's prefix-cache hits) goes to ``log_path``, kept after exit, else to a temporary file removed
    at exit. A request waits for the one before it to finish (``interrupt_requests`` off), so several clients may
    share the server.
    """
    port = port or free_port()
    log = log_path or Path(tempfile.mkstemp(prefix="llama_server_", suffix=".log")[1])
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model_path),
        "--model_alias", SERVER_MODEL_ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        # llama_cpp.server's default ends a streaming reply early ("[DONE]", no finish_reason) as soon as another
        # request waits: with several clients (xdist workers, an agent's parallel calls) answers came back empty
        "--interrupt_requests", "False",
    ]  # fmt: skip
    if n_threads:  # default: the server's own (half the logical CPUs), which copes with a busy machine
        cmd += ["--n_threads", str(n_threads)]
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen(cmd, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode} at start:\n{_tail(log)}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer {base_url}/models in {startup_timeout:.0f} s:\n{_tail(log)}")
            time.sleep(0.3)
        yield base_url
    finally:
        stop_process(proc, grace=15)
        if log_path is None:
            log.unlink(missing_ok=True)


_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection",
               "te", "trailer", "upgrade", "content-encoding", "accept-encoding"}  # fmt: skip


class CountingURL(str):
    """A base URL (a ``str``) that also reports how many chat completions went through its proxy."""

    proxy: CountingProxy

    def __new__(cls, value: str, proxy: CountingProxy) -> CountingURL:
        obj = super().__new__(cls, value)
        obj.proxy = proxy
        return obj

    @property
    def count(self) -> int:
        return self.proxy.count

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.proxy.requests

    def reset(self) -> None:
        self.proxy.reset()

    def hold_after(self, n: int) -> None:
        self.proxy.hold_after(n)

    def release(self) -> None:
        self.proxy.release()


class ThreadedProxy:
    """Lifecycle of a proxy served by an HTTP server in a thread, with its own httpx client: `start`, `close`, and a
    context manager. Subclasses set ``_server``, ``_thread`` and ``_client``."""

    _server: Any
    _thread: threading.Thread
    _client: httpx.Client

    def start(self) -> Self:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class CountingProxy(ThreadedProxy):
    """A threaded reverse proxy on 127.0.0.1 that counts ``POST .../chat/completions`` and forwards every request.

    ``upstream`` is the server's base URL (``http://127.0.0.1:PORT/v1``); ``url`` is the proxy's base URL with the
    same path. Responses, streamed ones included, are buffered before they are passed on. ``requests`` holds the
    JSON bodies of the counted calls (to check prompts). ``hold_after(n)`` makes every counted call after the n-th
    wait until ``release()``, so a test can stop a client at a known point however fast the server answers (replayed
    replies come back in milliseconds). Usage: see the module docstring.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = httpx.URL(upstream.rstrip("/"))
        self._lock = threading.Lock()
        self._count = 0
        self._requests: list[dict[str, Any]] = []
        self._hold_after: int | None = None
        self._released = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(HANG_GUARD_S, connect=5.0))
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
                return

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.command == "POST" and self.path.rstrip("/").endswith("/chat/completions"):
                    if proxy._record(body):
                        proxy._released.wait()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                target = proxy.upstream.copy_with(path=self.path.split("?")[0], query=self.path.partition("?")[2].encode() or None)
                try:
                    resp = proxy._client.request(self.command, target, headers=headers, content=body)
                except httpx.HTTPError as exc:
                    payload = json.dumps({"error": f"proxy: upstream failed: {exc}"}).encode()
                    self.send_response(502)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                content = resp.content
                self.send_response(resp.status_code)
                for key, value in resp.headers.items():
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(content)))
                try:
                    self.end_headers()
                    self.wfile.write(content)
                except (BrokenPipeError, ConnectionResetError):  # the client went away (a test killed it)
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="CountingProxy", daemon=True)
        port = self._server.server_address[1]
        self.url = CountingURL(str(self.upstream.copy_with(host="127.0.0.1", port=port)), self)

    def _record(self, body: bytes) -> bool:
        """Count the call; True when it must wait for `release`."""
        try:
            parsed = json.loads(body or b"null")
        except ValueError:
            parsed = {"raw": body.decode("utf-8", errors="replace")}
        with self._lock:
            self._count += 1
            self._requests.append(parsed)
            return self._hold_after is not None and self._count > self._hold_after

    def hold_after(self, n: int) -> None:
        """Counted calls after the ``n``-th (from now on, counting from the last `reset`) wait until `release`."""
        if n < 0:
            raise ValueError(f"hold_after needs n >= 0, got {n}")
        with self._lock:
            self._hold_after = n
            self._released.clear()

    def release(self) -> None:
        """Let held calls through and stop holding."""
        with self._lock:
            self._hold_after = None
            self._released.set()

    def close(self) -> None:
        self.release()  # a held call must not keep its handler thread waiting past the proxy's life
        super().close()

    @property
    def count(self) -> int:
        """Chat completion POSTs forwarded so far."""
        with self._lock:
            return self._count

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        with self._lock:
            self._count = 0
            self._requests.clear()

