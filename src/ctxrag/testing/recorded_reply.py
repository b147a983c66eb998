"""An in-process model's reply, recorded once beside the server's replies and read back: the reference side of a
parity test, so the test run loads the model only where the live side decodes.

A parity test asks the same greedy request of the model in this process and across a process boundary (a
``llama_cpp.server``, the warm model process) and expects the same text. Decoding both sides every run costs a second
load of the model; `recorded_reply` decodes the in-process side once per (GGUF sha256, ``n_ctx``, request), keeps it
in the reply cache's folder (`ctxrag.testing.reply_cache.ReplyCache`, the path ``in-process``, so keys never meet the
server's) and answers it from there afterwards. The cache modes mean what they mean for the server's replies
(`CacheMode`): ``on`` reads or decodes and records, ``record`` decodes again and overwrites, ``replay-only`` raises on
a missing reply, ``off`` decodes and records nothing. A used reply is logged as the proxy logs it (``hit <key>`` /
``miss <key>``), so ``python -m ctxrag.testing.reply_cache prune`` keeps it.

Example::

    text = recorded_reply(Path("tests/llm_replies"), gguf, 4096, {"prompt": "hi", "max_tokens": 16},
                          lambda: model.invoke("hi", max_tokens=16).text)   # decoded once, then read back
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxrag.testing.reply_cache import FORMAT, CacheMode, ReplyCache, model_sha256, request_key

IN_PROCESS_PATH = "in-process"
"""The path the in-process replies are keyed under (the server's are ``/v1/chat/completions`` and the like)."""


class MissingReplyError(LookupError):
    """``replay-only`` and no recorded reply for the request."""


def recorded_reply(cache_dir: Path, model_path: str | Path, n_ctx: int, request: dict[str, Any],
                   decode: Callable[[], str], *, mode: CacheMode = CacheMode.ON,
                   used_log: Path | None = None) -> str:
    """The in-process reply to ``request`` (a JSON-able description of everything that determines it: messages,
    ``max_tokens``, stop...): recorded under ``cache_dir`` when it is there, else ``decode()`` now, recorded unless
    ``mode`` is ``off``. Raises `MissingReplyError` naming the key in ``replay-only``."""
    key = request_key(model_sha256(model_path), n_ctx, IN_PROCESS_PATH, request)
    cache = ReplyCache(cache_dir)
    entry = cache.get(key) if mode in (CacheMode.ON, CacheMode.REPLAY_ONLY) else None
    if entry is not None:
        _log(used_log, "hit", key)
        return str(entry["text"])
    if mode is CacheMode.REPLAY_ONLY:
        raise MissingReplyError(f"no recorded in-process reply for key {key} (replay-only): {request!r}")
    text = decode()
    if mode is not CacheMode.OFF:
        cache.put(key, {"format": FORMAT, "model_sha256": model_sha256(model_path), "n_ctx": n_ctx,
                        "path": IN_PROCESS_PATH, "request": request, "text": text})
        _log(used_log, "miss", key)
    return text


def _log(used_log: Path | None, kind: str, key: str) -> None:
    if used_log is not None:
        with open(used_log, "a", encoding="utf-8") as out:
            out.write(f"{kind} {key}\n")
