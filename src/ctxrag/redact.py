"""One redaction for every text that leaves the process: known secrets and credentials in URLs and headers.

Secrets reach text in ways no call site can foresee: an endpoint that echoes the key in its 401 ("Incorrect API key
provided: sk-..."), a base URL with ``user:password@`` in a health line or an error detail, a traceback that quotes
a request. So every exit point (log records, the CLI's error line, the server's error details, ``/health``, the
event streams) passes its text through `redact`, which replaces

* every secret it was told about (`remember`, `remember_settings`: API keys, the server token, the Milvus token,
  URL passwords from the settings and the Basic credential made of them) with ``***``;
* the password of any ``scheme://user:password@host`` URL;
* the credential of ``Authorization: Bearer ...`` / ``Basic ...`` and ``api_key=...`` / ``"api_key": "..."``.

`install_log_redaction` makes every log record go through it (a record factory, so uvicorn's handlers, pytest's
and any the user adds are covered, tracebacks included), and the traceback of an uncaught exception too.

Example::

    from ctxrag.redact import redact, remember
    remember("sk-live-123456")
    redact("401: Incorrect API key provided: sk-live-123456 at http://admin:pw@host/v1")
    # '401: Incorrect API key provided: *** at http://admin:***@host/v1'
"""
from __future__ import annotations

import base64
import logging
import re
import sys
import threading
import traceback
from typing import Any
from urllib.parse import unquote, urlsplit

MASK = "***"
_MIN_SECRET = 4
"""Shorter values are not treated as secrets (replacing "ab" everywhere would garble every text)."""

_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False

_URL_CREDENTIALS = re.compile(r"(?P<head>\b[a-zA-Z][\w+.-]*://[^/\s:@]*:)(?P<pw>[^/\s@]+)(?=@)")
_AUTH_HEADER = re.compile(r"(?i)(?P<head>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)"
                          r"(?P<cred>[^\s\"',;}]+)")
_KEY_FIELD = re.compile(r"(?i)(?P<head>\b(?:api[_-]?key|access[_-]?token|auth[_-]?token|password)[\"']?\s*[:=]\s*"
                        r"[\"']?)(?P<cred>[^\s\"',;}&]{4,})")


def remember(*secrets: str | None) -> None:
    """Redact these values (and their URL-quoted forms) from now on."""
    with _lock:
        for secret in secrets:
            if isinstance(secret, str) and len(secret.strip()) >= _MIN_SECRET:
                _secrets.add(secret)
                _secrets.add(unquote(secret))


def remember_settings(settings: Any) -> None:
    """Every secret a `Settings` holds: API keys, the server token, the Milvus token, passwords in URLs."""
    from pydantic import BaseModel, SecretStr

    def walk(value: Any) -> None:
        if isinstance(value, SecretStr):
            remember(value.get_secret_value())
        elif isinstance(value, str) and "://" in value and "@" in value:
            try:
                parts = urlsplit(value)
            except ValueError:
                return
            if parts.password:  # and the Basic credential an HTTP client derives from it
                basic = f"{unquote(parts.username or '')}:{unquote(parts.password)}".encode()
                remember(parts.password, base64.b64encode(basic).decode("ascii"))
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name, None))

    walk(settings)


def redact(text: str) -> str:
    """`text` with known secrets, URL passwords and credentials in headers or key fields replaced by ``***``."""
    if not isinstance(text, str) or not text:
        return text
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _URL_CREDENTIALS.sub(lambda m: m.group("head") + MASK, text)
    text = _AUTH_HEADER.sub(lambda m: m.group("head") + MASK, text)
    return _KEY_FIELD.sub(lambda m: m.group("head") + (m.group("cred") if m.group("cred") == MASK else MASK), text)


def redact_value(value: Any) -> Any:
    """`redact` on every string inside a JSON-like value (dicts, lists); other values unchanged."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    return value


def install_log_redaction() -> None:
    """Make every log record of this process redacted at creation (its message and its traceback text), and the
    traceback of an uncaught exception too (the last resort of a command that meets an error nobody expected)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is the handler's problem, as before
            return record
        clean = redact(message)
        if clean != message:  # keep args otherwise (uvicorn's access formatter reads them)
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        sys.stderr.write(redact("".join(traceback.format_exception(kind, value, tb))))

    sys.excepthook = excepthook
