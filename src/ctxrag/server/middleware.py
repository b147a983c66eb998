"""Pure-ASGI middleware for the HTTP endpoint: bearer-token auth, a request body size limit, a batch size cap, the
cross-site guard for a server without a token (JSON only, local Origin/Host), and source-path hiding in the
intermediate-step streams.

All are plain ASGI (no ``BaseHTTPMiddleware``) so server-sent-event streams pass through, and all answer with a
JSON body ``{"detail": ...}`` like FastAPI's own errors.

Example::

    app = BearerAuthMiddleware(BodySizeLimitMiddleware(app, max_body_bytes=1_000_000), token=SecretStr("s3cret"),
                               public_paths={"/health"})
"""
from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Awaitable, Callable, Iterable

from pydantic import SecretStr

from ctxrag.errors import ConfigError
from ctxrag.settings import ServerSettings

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def send_json(send: Send, status: int, payload: dict[str, Any], headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


class BearerAuthMiddleware:
    """401 unless the request carries ``Authorization: Bearer <token>``; paths in `public_paths` stay open.

    The comparison is constant-time and the token never appears in a response or a log line.
    """

    def __init__(self, app: ASGIApp, token: str | SecretStr, public_paths: Iterable[str] = ("/health",)) -> None:
        # a SecretStr keeps the token out of reprs (Starlette's Middleware repr shows its keyword arguments)
        raw = token.get_secret_value() if isinstance(token, SecretStr) else token
        if not raw:
            raise ValueError("BearerAuthMiddleware needs a non-empty token")
        self.app = app
        self._token = raw.encode("utf-8")
        self.public_paths = {p.rstrip("/") or "/" for p in public_paths}

    def __repr__(self) -> str:  # never show the token
        return f"BearerAuthMiddleware(public_paths={sorted(self.public_paths)})"

    def _authorized(self, scope: Scope) -> bool:
        header = b""
        for name, value in scope.get("headers") or []:
            if name.lower() == b"authorization":
                header = value
                break
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer":
            given = b""
        # compare_digest on equal-length digests keeps the time independent of the token and of the guess
        return hmac.compare_digest(hmac.new(b"ctxrag", given.strip(), "sha256").digest(),
                                   hmac.new(b"ctxrag", self._token, "sha256").digest()) and bool(given.strip())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope.get("path", "").rstrip("/") or "/") in self.public_paths:
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "OPTIONS" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await send_json(send, 401, {"detail": "missing or invalid bearer token (send 'Authorization: Bearer <token>')"},
                        headers=[(b"www-authenticate", b"Bearer")])


class BodySizeLimitMiddleware:
    """413 for a request body over `max_body_bytes`, whether it declares a Content-Length or arrives chunked.

    A declared length over the limit is refused before reading; otherwise the body is read (at most the limit plus
    one chunk), then replayed to the app.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        if max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def _too_large(self, send: Send) -> None:
        await send_json(send, 413, {"detail": f"request body too large (limit {self.max_body_bytes} bytes)"},
                        headers=[(b"connection", b"close")])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers") or []:
            if name.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_json(send, 400, {"detail": f"bad Content-Length header {value[:40].decode('latin-1')!r}"})
                    return
                if declared > self.max_body_bytes:
                    await self._too_large(send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if too_deep(body):
            await send_json(send, 400, {"detail": f"request body nested too deeply (limit {MAX_JSON_DEPTH} levels of "
                                                  "'[' or '{')", "error": "RequestTooDeep"})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect like a normal receive

        await self.app(scope, replay, send)


MAX_JSON_DEPTH = 200
"""Deepest JSON nesting a request body may have: deeper bodies made the JSON parser raise RecursionError (a 500)."""


def too_deep(body: bytes) -> bool:
    """Whether a JSON body nests arrays/objects deeper than `MAX_JSON_DEPTH` (brackets inside strings ignored).

    Counting brackets first keeps the common case to two C-speed scans."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return False
    depth = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


class StreamErrorGuardMiddleware:
    """Ends a response cleanly when the app fails after it started sending (a stream that broke midway).

    LangServe sends an ``error`` event and then re-raises, which would cut the chunked body off mid-stream; here the
    error is logged server-side and the body is closed, so the client reads a complete stream ending in that event.
    Errors before the response started propagate unchanged (to the JSON exception handlers).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "finished": False}

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["finished"] = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - only swallowed once the response is under way
            if not state["started"]:
                raise
            model_error = _model_error(scope, exc)
            if model_error is not None:  # a dead or refusing chat endpoint: one line per request, not a traceback
                log.warning("%s %s failed while streaming: %s", scope.get("method"), scope.get("path"), model_error)
            else:
                log.error("%s %s failed while streaming: %s", scope.get("method"), scope.get("path"), exc,
                          exc_info=exc)
            if not state["finished"]:
                try:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except Exception:  # noqa: BLE001 - the client is gone
                    pass


def _model_error(scope: Scope, exc: BaseException) -> Exception | None:
    """`as_model_error` for the app's chat model (``app.state.llm``), looking inside exception groups and explicit
    causes; None when `exc` holds no model failure."""
    from ctxrag.models.chat import as_model_error

    llm = getattr(getattr(scope.get("app"), "state", None), "llm", None)
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:  # the stream wraps the model's error: an ExceptionGroup, or Starlette's RuntimeError from it
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        inner = getattr(current, "exceptions", None)  # BaseExceptionGroup (3.11+) or anyio's backport on 3.10
        if isinstance(inner, (list, tuple)):
            pending.extend(inner)
        elif (found := as_model_error(current, llm)) is not None:
            return found
        elif current.__cause__ is not None:
            pending.append(current.__cause__)
    return None


LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            decoded: str = value.decode("latin-1")  # ASGI headers are (bytes, bytes) pairs
            return decoded
    return None


def host_of(value: str) -> str:
    """The host name of a ``Host`` header or an ``Origin`` URL, lower-case, without port or brackets.

    >>> host_of("http://[::1]:8000"), host_of("LocalHost:8000")
    ('::1', 'localhost')
    """
    value = value.strip().lower()
    if "://" in value:
        value = value.split("://", 1)[1]
    value = value.split("/", 1)[0].rsplit("@", 1)[-1]
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class LocalRequestGuardMiddleware:
    """Cross-site request protection for a server without a token (any web page the user opens could POST to it).

    Every POST must be ``application/json`` (415 otherwise): a browser sends JSON cross-site only after a CORS
    preflight, which this server never grants. When `check_origin` is on (no token set), a POST whose ``Origin``
    or ``Host`` names another host than localhost, 127.0.0.1, ::1 or one of `allowed_hosts` gets 403 (a foreign
    page, or DNS rebinding).
    """

    def __init__(self, app: ASGIApp, *, check_origin: bool, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.check_origin = check_origin
        self.allowed = LOCAL_HOSTS | {host_of(h) for h in allowed_hosts if h and h not in ("0.0.0.0", "::")}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        if self.check_origin:
            for name in (b"origin", b"host"):
                value = _header(scope, name)
                if value is not None and value != "null" and host_of(value) not in self.allowed:
                    await send_json(send, 403, {"detail": f"cross-site request refused: {name.decode().title()} "
                                                          f"{value[:100]!r} is not this server (allowed hosts: "
                                                          f"{sorted(self.allowed)}; add others with "
                                                          "server.allowed_hosts, or set server.auth_token)"})
                    return
                if name == b"origin" and value == "null":  # sandboxed frames and file:// pages send "null"
                    await send_json(send, 403, {"detail": "cross-site request refused: Origin 'null'"})
                    return
        content_type = (_header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            await send_json(send, 415, {"detail": f"POST bodies must be sent as 'application/json', got "
                                                  f"{content_type or 'no content type'!r}"})
            return
        await self.app(scope, receive, send)


class BatchSizeLimitMiddleware:
    """413 for a ``.../batch`` request carrying more than `max_inputs` inputs (LangServe's ``{"inputs": [...]}``).

    Runs inside `BodySizeLimitMiddleware`, so the body it reads is already bounded; the body is replayed to the app.
    """

    def __init__(self, app: ASGIApp, max_inputs: int) -> None:
        if max_inputs <= 0:
            raise ValueError(f"max_inputs must be positive, got {max_inputs}")
        self.app = app
        self.max_inputs = max_inputs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope.get("path", "").rstrip("/").endswith("/batch"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            inputs = json.loads(body).get("inputs")
        except (ValueError, AttributeError):
            inputs = None  # malformed: the route answers it with its own 422
        if isinstance(inputs, list) and len(inputs) > self.max_inputs:
            await send_json(send, 413, {"detail": f"too many inputs in one batch: {len(inputs)} (limit {self.max_inputs};"
                                                  " setting server.max_batch_inputs, env "
                                                  "CTXRAG_SERVER__MAX_BATCH_INPUTS)"})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def is_local_client(host: str | None) -> bool:
    """True for a loopback client address (127.0.0.0/8, ::1, IPv4-mapped 127.x)."""
    host = (host or "").lower()
    return host in LOCAL_HOSTS or host.startswith("127.") or host.startswith("::ffff:127.")


def check_auth_token(server: ServerSettings) -> str | None:
    """The token to require, None when auth is off; `ConfigError` for a token that is set but blank (fail closed:
    ``CTXRAG_SERVER__AUTH_TOKEN=`` must not silently serve without auth). Shared by ``ctxrag serve`` and ``ctxrag mcp``."""
    if server.auth_token is None:
        return None
    raw = server.auth_token.get_secret_value()
    if not raw.strip():
        raise ConfigError("server.auth_token is set but empty (CTXRAG_SERVER__AUTH_TOKEN=''): refusing to start "
                          "without auth; set a real token, or unset the variable to serve without auth")
    return raw


def may_see_paths(expose: str, client_host: str | None) -> bool:
    """Whether a client at `client_host` may see absolute source paths under the ``server.expose_paths`` policy."""
    return expose == "always" or (expose == "local" and is_local_client(client_host))


class EventStreamRewriteMiddleware:
    """Rewrites every ``data:`` JSON of the server-sent events of ``/stream_log`` and ``/stream_events`` with
    `rewrite`, for clients that `applies_to` selects (by client address).

    Those two endpoints send the outputs of every intermediate step (the retriever's documents with their
    source paths), which the per-request config of the final output does not reach.
    """

    _PATHS = ("/stream_log", "/stream_events")

    def __init__(self, app: ASGIApp, *, rewrite: Callable[[Any], Any], applies_to: Callable[[str | None], bool]) -> None:
        self.app = app
        self.rewrite = rewrite
        self.applies_to = applies_to

    def _event(self, event: bytes) -> bytes:
        lines = event.split(b"\r\n") if b"\r\n" in event else event.split(b"\n")
        out = []
        for line in lines:
            if line.startswith(b"data: "):
                try:
                    data = json.loads(line[6:])
                except ValueError:
                    out.append(line)
                    continue
                line = b"data: " + json.dumps(self.rewrite(data), ensure_ascii=False).encode("utf-8")
            out.append(line)
        return (b"\r\n" if b"\r\n" in event else b"\n").join(out)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "").rstrip("/")
        client = (scope.get("client") or (None, None))[0]
        if scope["type"] != "http" or not path.endswith(self._PATHS) or not self.applies_to(client):
            await self.app(scope, receive, send)
            return
        buffer = b""

        async def rewriting_send(message: Message) -> None:
            nonlocal buffer
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-length"]
                await send({**message, "headers": headers})
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            buffer += message.get("body", b"")
            more = message.get("more_body", False)
            events = []
            while True:  # complete events end with a blank line
                cut = min((i for i in (buffer.find(b"\r\n\r\n"), buffer.find(b"\n\n")) if i >= 0), default=-1)
                if cut < 0:
                    break
                sep = 4 if buffer[cut:cut + 4] == b"\r\n\r\n" else 2
                events.append(self._event(buffer[:cut]) + buffer[cut:cut + sep])
                buffer = buffer[cut + sep:]
            if not more and buffer:
                events.append(self._event(buffer))
                buffer = b""
            await send({"type": "http.response.body", "body": b"".join(events), "more_body": more})

        await self.app(scope, receive, rewriting_send)


class CloseConnectionMiddleware:
    """Every HTTP response says ``Connection: close``, so no client keeps a pooled connection to this server.

    Why: LangServe's `RemoteRunnable` keeps the connections of ``ainvoke``/``astream`` in an async pool bound to the
    event loop that opened them, and closes that pool at interpreter exit in a new loop, which prints
    ``RuntimeError: Event loop is closed`` after any script that ran ``asyncio.run(remote.ainvoke(...))``. With no
    connection left open there is nothing to close then. A new connection per request costs a TCP handshake, small
    beside a retrieval or an answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)
