"""Classification of LLM call errors: retry (transient) vs. no server at all (unreachable)."""
from __future__ import annotations

import httpx
import openai
import pytest

from ctxrag.indexing.contexts.retry import is_transient_error, is_unreachable_error

REQUEST = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")


def _status(code: int) -> openai.APIStatusError:
    return openai.APIStatusError("err", response=httpx.Response(code, request=REQUEST), body=None)


@pytest.mark.parametrize(
    ("exc", "transient", "unreachable"),
    [
        (openai.APIConnectionError(request=REQUEST), True, True),
        (openai.APITimeoutError(request=REQUEST), True, False),
        (httpx.ConnectError("refused"), True, True),
        (ConnectionRefusedError(111, "refused"), True, True),
        (httpx.ReadTimeout("slow"), True, False),
        (_status(429), True, False),
        (_status(503), True, False),
        (_status(400), False, False),
        (ValueError("bad prompt"), False, False),
    ],
)
def test_classification(exc: BaseException, transient: bool, unreachable: bool) -> None:
    assert is_transient_error(exc) is transient
    assert is_unreachable_error(exc) is unreachable


def test_cause_chain_is_followed() -> None:
    try:
        try:
            raise ConnectionRefusedError(111, "refused")
        except ConnectionRefusedError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert is_unreachable_error(outer) and is_transient_error(outer)
