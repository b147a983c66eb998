"""Which LLM call errors are worth a retry, and which mean no server is there at all.

Classified by type name along the exception chain, so no client library (openai, anthropic) must be importable.

Example::

    import httpx
    from ctxrag.indexing.contexts.retry import is_transient_error, is_unreachable_error
    assert is_transient_error(httpx.ReadTimeout("slow"))
    assert is_unreachable_error(ConnectionRefusedError())
"""
from __future__ import annotations

import httpx

_TRANSIENT_NAMES = {
    "APIConnectionError", "APITimeoutError", "RateLimitError", "InternalServerError", "ServiceUnavailableError",
    "OverloadedError", "ConnectError", "ConnectTimeout", "ReadTimeout", "ReadError", "RemoteProtocolError",
}  # fmt: skip


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def is_transient_error(exc: BaseException) -> bool:
    """Connection failures, timeouts, 429 and 5xx: worth a retry."""
    for e in _chain(exc):
        if isinstance(e, (ConnectionError, TimeoutError, httpx.TransportError)) or type(e).__name__ in _TRANSIENT_NAMES:
            return True
        status = getattr(e, "status_code", None)
        if isinstance(status, int) and (status == 429 or status >= 500):
            return True
    return False


def is_unreachable_error(exc: BaseException) -> bool:
    """Nothing listens there (connection refused, unknown host): not a timeout of a busy server."""
    for e in _chain(exc):
        if isinstance(e, ConnectionRefusedError) or type(e).__name__ in {"ConnectError", "APIConnectionError"}:
            return True
    return False
