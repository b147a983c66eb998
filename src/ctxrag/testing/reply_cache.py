"""Replies of the real test model, recorded once and replayed: a caching reverse proxy in front of ``llama_cpp.server``.

A ``POST .../chat/completions`` or ``.../completions`` whose reply is determined by its request (``temperature`` 0, or
a fixed ``seed``) is keyed by the sha256 of (the GGUF's sha256, the server's ``n_ctx``, the path, the whole JSON body:
messages or prompt, sampling parameters, grammar or response_format, max_tokens, logprobs, stream, tools...). A key
the cache holds is answered from its file, byte for byte what the server sent (a streamed reply as the same SSE
events); a key it lacks is decoded by the server and recorded, one small JSON file per key, written atomically
(a refusal of the request too, see `_determined`; a passing server error is not recorded). Checkout and pytest
temporary paths in a prompt are keyed as placeholders (`request_key`).
Everything else (sampled requests, ``GET /models``, a request sent with ``Cache-Control: no-cache``) passes through.
The upstream is a callable, so a run whose requests are all recorded never starts (never loads) the model.

Modes (`CacheMode`, ``$CTXRAG_TEST_LLM_CACHE``): ``on`` replays and records, ``record`` decodes every cacheable
request again and overwrites its file, ``replay-only`` answers a miss with HTTP 503 naming the key (nothing decodes),
``off`` passes everything through. Every request is logged to ``used_log`` (``hit <key>``, ``miss <key>``,
``pass <method> <path>``), so a run can say what it used and `prune` can remove the files no run used.

Example::

    with CachingProxy(lambda: "http://127.0.0.1:8000/v1", cache_dir=Path("tests/llm_replies"),
                      model_sha256=sha, used_log=Path("used.log")) as proxy:
        ChatOpenAI(base_url=proxy.url, api_key="x", model="m", temperature=0).invoke("hi")   # miss: decoded, saved
        ChatOpenAI(base_url=proxy.url, api_key="x", model="m", temperature=0).invoke("hi")   # hit: nothing decoded
        assert (proxy.hits, proxy.misses) == (1, 1)

    python -m ctxrag.testing.reply_cache prune --used used.log tests/llm_replies   # drop files no run used
"""
from __future__ import annotations

import argparse
import enum
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from ctxrag.testing.llm_server import _HOP_BY_HOP, HANG_GUARD_S, ThreadedProxy

CACHE_ENV = "CTXRAG_TEST_LLM_CACHE"
STATS_PATH = "/ctxrag-reply-cache"
"""``GET`` on this path answers the proxy's counts as JSON (never forwarded): a readiness check that loads no model."""
_CACHED_PATHS = ("/chat/completions", "/completions")
_SSE_EVENT_END = re.compile(r"(?<=\r\n\r\n)|(?<=\n\n)")
FORMAT = 1
_LOG_WORD = {"hits": "hit", "misses": "miss", "passed": "pass"}


class CacheMode(enum.Enum):
    """What the proxy does with a cacheable request (see the module docstring)."""

    ON = "on"
    RECORD = "record"
    REPLAY_ONLY = "replay-only"
    OFF = "off"

    @classmethod
    def from_str(cls, value: str | None) -> CacheMode:
        """The mode named ``value`` (``None`` or empty: ``on``); a ``ValueError`` naming the value otherwise."""
        if not value:
            return cls.ON
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise ValueError(f"{CACHE_ENV}={value!r}: expected one of {[m.value for m in cls]}") from None


def model_sha256(path: str | Path) -> str:
    """sha256 of a GGUF: from the ``<file>.sha256`` sidecar the model assembly writes when its size and mtime still
    match the file, else read from the file."""
    path = Path(path)
    st = path.stat()
    sidecar = path.with_name(path.name + ".sha256")
    try:
        record = json.loads(sidecar.read_text(encoding="utf-8"))
        if record.get("size") == st.st_size and record.get("mtime_ns") == st.st_mtime_ns and record.get("sha256"):
            return str(record["sha256"])
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def is_deterministic(body: Any) -> bool:
    """Whether a completion request's reply is determined by the request: greedy (``temperature`` 0) or a fixed
    ``seed``. A request without ``temperature`` samples (the server's default is not 0)."""
    if not isinstance(body, dict):
        return False
    if body.get("seed") is not None:
        return True
    temperature = body.get("temperature")
    return isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature == 0


_PYTEST_TMP = re.compile(re.escape(tempfile.gettempdir()) + r"/pytest-of-[^/\"\\]+/pytest-\d+(?:/popen-gw\d+)?")


def request_key(model_sha: str, n_ctx: int, path: str, body: dict[str, Any],
                aliases: Mapping[str, str] | None = None) -> str:
    """The cache key of a request: sha256 of the model's sha256, ``n_ctx``, the endpoint path and the canonical JSON
    body (keys sorted, so two clients that order fields differently share the entry).

    Paths that differ between checkouts and runs are read as placeholders: each ``aliases`` key (a folder such as the
    repository root) as its value, and pytest's per-run temporary folder (``.../pytest-of-USER/pytest-N[/popen-gwK]``)
    as ``<pytest-tmp>``, so a prompt that quotes a file's path keys the same in CI's fresh clone."""
    canonical = json.dumps({"model_sha256": model_sha, "n_ctx": n_ctx, "path": path, "body": body},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for folder, placeholder in sorted((aliases or {}).items(), key=lambda kv: -len(kv[0])):
        canonical = canonical.replace(folder, placeholder)
    canonical = _PYTEST_TMP.sub("<pytest-tmp>", canonical)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def sse_events(body: str) -> list[str]:
    """A streamed reply split into its SSE events, each with its blank-line end (joined back they are the body)."""
    return [part for part in _SSE_EVENT_END.split(body) if part]


class ReplyCache:
    """The folder of recorded replies: ``<key>.json`` each, with the request (to read a diff), the status, the
    content type and the body (a streamed one as its list of SSE events)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Write the entry atomically (a concurrent reader sees the old file or the new one, never half of one)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.folder)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(entry, out, ensure_ascii=False, indent=1, sort_keys=True)
            out.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the committed file from other users of the checkout
        os.replace(tmp, self.path(key))

    def keys(self) -> set[str]:
        return {p.stem for p in self.folder.glob("*.json")}


def _determined(status: int, content: bytes) -> bool:
    """Whether a reply is as determined by its request as an answer: a success, a refusal (4xx), or the error
    llama_cpp.server answers with HTTP 500 for a request its schema rejects (a client that then falls back, as
    ``with_structured_output`` does from ``json_schema`` to ``json_object``, asks it every time). Other server errors
    may be passing trouble: not recorded."""
    return status < 500 or b"validation error" in content[:200]


def _body_of(entry: dict[str, Any]) -> bytes:
    return ("".join(entry["events"]) if "events" in entry else entry["body"]).encode("utf-8")


class CachingProxy(ThreadedProxy):
    """A threaded reverse proxy on 127.0.0.1 that answers recorded model replies and records new ones.

    ``upstream`` returns the server's base URL (``http://127.0.0.1:PORT/v1``) and is called on the first request
    that must reach the server (it may start it); ``url`` is the proxy's base URL with the same path (``/v1``). A
    live streamed reply is passed on chunk by chunk while it is recorded; one that did not end with ``[DONE]`` is not
    recorded. Concurrent identical requests decode once: the second waits for the first and replays it.
    """

    def __init__(self, upstream: Callable[[], str] | str, *, cache_dir: Path, model_sha256: str, n_ctx: int = 4096,
                 mode: CacheMode = CacheMode.ON, used_log: Path | None = None, base_path: str = "/v1",
                 aliases: Mapping[str, str] | None = None) -> None:
        self._upstream = upstream if callable(upstream) else (lambda: upstream)
        self.cache = ReplyCache(cache_dir)
        self.model_sha256, self.n_ctx, self.mode, self.used_log = model_sha256, n_ctx, mode, used_log
        self.aliases = dict(aliases or {})
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.hits = self.misses = self.passed = 0
        self._client = httpx.Client(timeout=httpx.Timeout(HANG_GUARD_S, connect=5.0))
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
                return

            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                proxy._handle(self, body)

            do_GET = do_POST = do_PUT = do_DELETE = handle_one

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="CachingProxy", daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{base_path}"

    # ------------------------------------------------------------------ the request's way

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        path = handler.path.split("?")[0]
        if handler.command == "GET" and path.rstrip("/").endswith(STATS_PATH):
            self._send(handler, 200, "application/json", json.dumps(self.stats()).encode())
            return
        parsed = self._json(body)
        cacheable = (handler.command == "POST" and path.rstrip("/").endswith(_CACHED_PATHS)
                     and self.mode is not CacheMode.OFF and is_deterministic(parsed)
                     and "no-cache" not in (handler.headers.get("Cache-Control") or "").lower())
        if not cacheable:
            self._count("passed", f"{handler.command} {path}")
            self._forward(handler, body, record=None)
            return
        key = request_key(self.model_sha256, self.n_ctx, path, parsed, self.aliases)
        with self._key_lock(key):  # an identical request at the same time waits, then replays this one's reply
            entry = None if self.mode is CacheMode.RECORD else self.cache.get(key)
            if entry is not None:
                self._count("hits", key)
                self._replay(handler, entry)
                return
            self._count("misses", key)
            if self.mode is CacheMode.REPLAY_ONLY:
                msg = f"reply cache: no recorded reply for key {key} ({CACHE_ENV}=replay-only)"
                self._send(handler, 503, "application/json", json.dumps({"error": msg}).encode())
                return
            self._forward(handler, body, record=(key, path, parsed))

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes,
                 record: tuple[str, str, dict[str, Any]] | None) -> None:
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
        try:
            upstream = httpx.URL(self._upstream().rstrip("/"))
            target = upstream.copy_with(path=handler.path.split("?")[0],
                                        query=handler.path.partition("?")[2].encode() or None)
            with self._client.stream(handler.command, target, headers=headers, content=body) as resp:
                ctype = resp.headers.get("content-type", "application/json")
                if not ctype.startswith("text/event-stream"):
                    content = resp.read()
                    self._send(handler, resp.status_code, ctype, content, resp.headers)
                    if record and _determined(resp.status_code, content):
                        self._save(record, resp.status_code, ctype, content.decode("utf-8"), stream=False)
                    return
                handler.send_response(resp.status_code)
                for k, v in resp.headers.items():
                    if k.lower() not in _HOP_BY_HOP:
                        handler.send_header(k, v)
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                received = bytearray()
                for chunk in resp.iter_raw():
                    received += chunk
                    self._chunk(handler, chunk)
                self._chunk(handler, b"")
        except (httpx.HTTPError, RuntimeError) as exc:  # RuntimeError: the upstream did not start (its log tail)
            self._send(handler, 502, "application/json", json.dumps({"error": f"proxy: upstream failed: {exc}"}).encode())
            return
        text = received.decode("utf-8")
        if record and resp.status_code == 200 and "data: [DONE]" in text:  # a reply cut short is not recorded
            self._save(record, resp.status_code, ctype, text, stream=True)

    def _replay(self, handler: BaseHTTPRequestHandler, entry: dict[str, Any]) -> None:
        if "events" not in entry:
            self._send(handler, entry["status"], entry["content_type"], _body_of(entry))
            return
        handler.send_response(entry["status"])
        handler.send_header("Content-Type", entry["content_type"])
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for event in entry["events"]:
            self._chunk(handler, event.encode("utf-8"))
        self._chunk(handler, b"")

    def _save(self, record: tuple[str, str, dict[str, Any]], status: int, ctype: str, text: str, *,
              stream: bool) -> None:
        key, path, request = record
        entry: dict[str, Any] = {"format": FORMAT, "model_sha256": self.model_sha256, "n_ctx": self.n_ctx,
                                 "path": path, "request": request, "status": status, "content_type": ctype}
        entry.update({"events": sse_events(text)} if stream else {"body": text})
        self.cache.put(key, entry)

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _json(body: bytes) -> Any:
        try:
            return json.loads(body or b"null")
        except ValueError:
            return None

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, ctype: str, content: bytes,
              headers: httpx.Headers | None = None) -> None:
        handler.send_response(status)
        for k, v in (headers or {}).items():
            if k.lower() not in _HOP_BY_HOP and k.lower() != "content-type":
                handler.send_header(k, v)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(content)))
        handler.end_headers()
        handler.wfile.write(content)

    @staticmethod
    def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
        handler.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        handler.wfile.flush()

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def _count(self, what: str, key: str | None = None) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)
            if key and self.used_log is not None:
                with open(self.used_log, "a", encoding="utf-8") as out:
                    out.write(f"{_LOG_WORD[what]} {key}\n")

    def stats(self) -> dict[str, Any]:
        """Counts so far: ``hits``, ``misses`` (decoded and recorded, or refused in replay-only), ``passed``."""
        with self._lock:
            return {"mode": self.mode.value, "hits": self.hits, "misses": self.misses, "passed": self.passed}



# ---------------------------------------------------------------------------------------- the used keys and pruning


def read_used(logs: Iterable[Path]) -> dict[str, set[str]]:
    """``{"hit": keys, "miss": keys}`` from used-key logs (a missing log counts as empty; passes are not keys)."""
    used: dict[str, set[str]] = {"hit": set(), "miss": set()}
    for log in logs:
        if Path(log).is_file():
            for line in Path(log).read_text(encoding="utf-8").splitlines():
                kind, _, key = line.partition(" ")
                if kind in used and key:
                    used[kind].add(key)
    return used


def prune(cache_dir: Path, used: set[str], *, dry_run: bool = False) -> list[Path]:
    """Remove (or with ``dry_run`` only list) the recorded replies whose key is not in ``used``."""
    cache = ReplyCache(cache_dir)
    stale = sorted(cache.path(k) for k in cache.keys() - used)
    if not dry_run:
        for path in stale:
            path.unlink()
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ctxrag.testing.reply_cache",
                                 description="the test suite's recorded model replies")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prune", help="remove the recorded replies no run in --used used (run the whole suite first)")
    p.add_argument("cache_dir", type=Path)
    p.add_argument("--used", type=Path, action="append", required=True,
                   help="a used-keys file a test run wrote ($CTXRAG_TEST_LLM_USED); repeatable")
    p.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    missing = [str(u) for u in args.used if not u.is_file()]
    if missing:
        ap.error(f"no such used-keys file: {', '.join(missing)}")
    used = read_used(args.used)
    total = len(ReplyCache(args.cache_dir).keys())
    stale = prune(args.cache_dir, used["hit"] | used["miss"], dry_run=args.dry_run)
    print(f"{'would remove' if args.dry_run else 'removed'} {len(stale)} of {total} recorded replies in {args.cache_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
