"""Secrets never leave the process: a real HTTP endpoint on 127.0.0.1 that echoes the API key in its 401, a base
URL with ``user:password@``, and `ctxrag --debug ask` / `ctxrag serve` (real processes) in front of it.

Before: the key came out 26 times in `ctxrag --debug ask`, in the server's /ask/stream_log body and 8 tracebacks
of its log; the URL's password on the unauthenticated /health and in 503 details."""
from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from ctxrag.redact import redact, remember
from test_kb_concurrency import KB, _cli, _env, _seed_kb, _serve
from ctxrag.testing.llm_server import HANG_GUARD_S

KEY = "sk-test-Zq8LkVv2MfPq0rW3"
PASSWORD = "hunter2-Xy9Pw"


class _EchoKey401(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        auth = self.headers.get("authorization", "")
        type(self).seen.append(auth)
        body = json.dumps({"error": {"message": f"Incorrect API key provided: {auth.removeprefix('Bearer ')}. "
                                                f"You sent Authorization: {auth}", "type": "invalid_request_error",
                                     "code": "invalid_api_key"}}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _echo_server(creds: str) -> Iterator[str]:
    """`creds` "key": the client sends ``Bearer KEY``; "password": the URL has ``admin:PASSWORD@`` (sent as Basic)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoKey401)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    userinfo = f"admin:{PASSWORD}@" if creds == "password" else ""
    try:
        yield f"http://{userinfo}127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _llm_env(home: Path, url: str) -> dict[str, str]:
    return {**_env(home, "fake"), "CTXRAG_LLM__PROVIDER": "openai", "CTXRAG_LLM__BASE_URL": url,
            "CTXRAG_LLM__API_KEY": KEY, "CTXRAG_LLM__MAX_RETRIES": "0", "CTXRAG_LLM__TIMEOUT": "30"}


BASIC = "YWRtaW46aHVudGVyMi1YeTlQdw=="  # base64("admin:" + PASSWORD): what the endpoint echoes for the URL


def _assert_clean(text: str, where: str) -> None:
    for secret in (KEY, PASSWORD, BASIC):
        at = text.find(secret)
        assert at < 0, f"{secret[:6]}... in {where}: ...{text[max(0, at - 300):at + 60]}"


def _endpoint_saw(creds: str) -> None:
    want = KEY if creds == "key" else BASIC
    assert any(want in s for s in _EchoKey401.seen), f"the endpoint never got the credential: {_EchoKey401.seen}"


def test_redact_masks_known_secrets_url_passwords_and_auth_headers() -> None:
    remember("abc-secret-123")
    assert redact("key abc-secret-123, url https://u:p%40ss@h/v1, Authorization: Bearer tok.en") == \
        "key ***, url https://u:***@h/v1, Authorization: Bearer ***"
    assert redact("http://h:8000/v1 and note://42") == "http://h:8000/v1 and note://42"


@pytest.mark.parametrize("creds", ["key", "password"])
def test_debug_ask_never_prints_the_key_or_the_url_password(tmp_path: Path, creds: str) -> None:
    home = tmp_path / "home"
    _seed_kb(tmp_path, _env(home, "fake"))
    _EchoKey401.seen = []
    with _echo_server(creds) as url:
        r = subprocess.run(_cli("--debug", "ask", "What does the seed file mention?", "--kb", KB),
                           env=_llm_env(home, url), capture_output=True, text=True, timeout=HANG_GUARD_S)
    _endpoint_saw(creds)
    assert r.returncode != 0 and "401" in r.stdout + r.stderr, r.stdout + r.stderr[-2000:]
    _assert_clean(r.stdout + r.stderr, "ctxrag --debug ask output")


@pytest.mark.parametrize("creds", ["key", "password"])
def test_server_health_errors_streams_and_log_never_carry_the_key(tmp_path: Path, creds: str) -> None:
    home = tmp_path / "home"
    _seed_kb(tmp_path, _env(home, "fake"))
    _EchoKey401.seen = []
    with _echo_server(creds) as url:
        with _serve(home, _llm_env(home, url)) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
            health = c.get("/health")
            _assert_clean(health.text, "/health")
            ask = c.post("/ask/invoke", json={"input": {"question": "What does the seed file mention?"}})
            assert ask.status_code == 503, ask.text
            _assert_clean(ask.text, "the /ask 503 detail")
            streamed = c.post("/ask/stream_log", json={"input": {"question": "What does the seed file mention?"}})
            _assert_clean(streamed.text, "/ask/stream_log")
            chat = c.post("/chat/invoke", json={"input": {"question": "What does the seed file mention?"}})
            _assert_clean(chat.text, "/chat")
        log = next(tmp_path.glob("serve-*.log")).read_text()
    _endpoint_saw(creds)
    _assert_clean(log, "the server log")
