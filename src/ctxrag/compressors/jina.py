"""Reranking through Jina's ``/v1/rerank`` protocol: Jina AI, or self-hosted Xinference, TEI, vLLM servers.

Request ``POST {base_url}/rerank`` with ``{"model", "query", "documents", "top_n", "return_documents": false}``;
response ``{"results": [{"index", "relevance_score"}, ...]}``. Large pools are sent in batches (scores of a
cross-encoder are absolute, so batches merge by score). 429 and 5xx answers, read timeouts and dropped connections
are retried with exponential backoff (honouring ``Retry-After``); a connection that cannot be made at all (DNS
failure, connection refused, connect timeout) is not retried: the service is not there, and asking again only delays
the fallback. When the service fails for good the documents come back in their input order, cut to ``top_n``, with a
logged warning (``strict=True`` raises `ModelError` instead). Jina's public API without an API key is refused at
construction (`ConfigError`), so no request is sent that can only fail.
The API key is sent only in the ``Authorization`` header and is redacted from every log line and error message.

Example::

    from ctxrag.compressors.jina import JinaReranker
    reranker = JinaReranker(base_url="http://127.0.0.1:9997/v1", model="bge-reranker-v2-m3", top_n=5)
    best = reranker.compress_documents(docs, "what is contextual retrieval?")
    best[0].metadata["rerank_score"]
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import httpx
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, Field, SecretStr, model_validator
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from ctxrag.errors import ModelError
from ctxrag.prompts.rerank import rerank_text
from ctxrag.schema import SCORE

log = logging.getLogger(__name__)

RERANK_SCORE = "rerank_score"


class _TransientHTTPError(Exception):
    """A 429 or 5xx answer: worth another try."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retryable(exc: BaseException) -> bool:
    """429/5xx and transient transport failures; not a connection that cannot be made (DNS, refused)."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol)):
        return False
    return isinstance(exc, (_TransientHTTPError, httpx.TransportError))


PUBLIC_HOST = "api.jina.ai"
"""Jina's public API host, which needs an API key."""


def missing_key_problem(base_url: str, api_key: SecretStr | str | None) -> str | None:
    """Why a reranker on `base_url` with `api_key` cannot work without sending a request, or None."""
    key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else (api_key or "")
    if httpx.URL(base_url).host == PUBLIC_HOST and not key.strip():
        return (f"JinaReranker: {base_url} needs an API key (set CTXRAG_RERANK__API_KEY, get one at https://jina.ai), "
                "or point base_url at a self-hosted rerank server (CTXRAG_RERANK__BASE_URL)")
    return None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


class JinaReranker(BaseDocumentCompressor):
    """Cross-encoder reranking over HTTP with Jina's rerank protocol; sets ``rerank_score`` and ``score``.

    Example::

        reranker = JinaReranker(api_key="jina_...", top_n=20)          # api.jina.ai
        local = JinaReranker(base_url="http://127.0.0.1:8080/v1", model="bge-reranker-v2-m3")
        local.compress_documents([Document("Paris is in France.")], "capital of France")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str = "https://api.jina.ai/v1"
    """Endpoint root; ``/rerank`` is appended."""
    model: str = "jina-reranker-v2-base-multilingual"
    """Model name sent with every request."""
    api_key: SecretStr | None = None
    """Bearer token (None for servers without auth); never logged."""
    top_n: int | None = Field(default=20, ge=1)
    """How many documents to return (None: all, reordered)."""
    batch_size: int = Field(default=64, ge=1)
    """Documents per request; larger pools are split and merged by score."""
    max_concurrency: int = Field(default=4, ge=1)
    """Batches in flight at once on the async path."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds per request."""
    max_retries: int = Field(default=3, ge=0)
    """Further attempts after a 429, 5xx, read timeout or dropped connection (not after DNS / refused)."""
    backoff: float = Field(default=0.5, ge=0)
    """First wait in seconds; doubles after every failed attempt."""
    max_backoff: float = Field(default=8.0, ge=0)
    """Longest wait between attempts, ``Retry-After`` included."""
    include_context: bool = True
    """Send a chunk's contextual-retrieval context before its text."""
    strict: bool = False
    """Raise `ModelError` when the service fails for good instead of returning the input order."""

    @model_validator(mode="after")
    def _key_for_public_api(self) -> JinaReranker:
        problem = missing_key_problem(self.base_url, self.api_key)
        if problem:
            raise ValueError(problem)
        return self

    # -- protocol ----------------------------------------------------------------------------------------------
    @property
    def _url(self) -> str:
        return self.base_url.rstrip("/") + "/rerank"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key is not None and self.api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return headers

    def _redact(self, text: str) -> str:
        key = self.api_key.get_secret_value() if self.api_key is not None else ""
        return text.replace(key, "***") if key else text

    def _payload(self, query: str, texts: list[str]) -> dict[str, Any]:
        top_n = len(texts) if self.top_n is None else min(self.top_n, len(texts))
        return {"model": self.model, "query": query, "documents": texts, "top_n": top_n, "return_documents": False}

    def _parse(self, response: httpx.Response, n_docs: int) -> list[tuple[int, float]]:
        """(index in the batch, relevance score) pairs; raises on HTTP errors and malformed bodies."""
        status = response.status_code
        if status >= 400:
            detail = self._redact(_detail(response))
            message = f"Jina rerank at {self._redact(self._url)} answered HTTP {status}: {detail}"
            if status == 429 or status >= 500:
                raise _TransientHTTPError(message, _retry_after(response))
            raise ModelError(message)
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            excerpt = self._redact(response.text[:200])
            raise ModelError(f"Jina rerank at {self._url}: response is not JSON: {excerpt!r}") from None
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list):
            excerpt = self._redact(str(body)[:200])
            raise ModelError(f"Jina rerank at {self._url}: response has no 'results' list: {excerpt}")
        pairs: list[tuple[int, float]] = []
        seen: set[int] = set()
        for item in results:
            index = item.get("index") if isinstance(item, dict) else None
            score = item.get("relevance_score") if isinstance(item, dict) else None
            valid = (
                isinstance(index, int) and not isinstance(index, bool) and 0 <= index < n_docs and index not in seen
                and isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score)
            )
            if not valid:
                excerpt = self._redact(str(item)[:200])
                raise ModelError(f"Jina rerank at {self._url}: bad result {excerpt} for {n_docs} documents")
            seen.add(index)  # type: ignore[arg-type]
            pairs.append((index, float(score)))  # type: ignore[arg-type]
        return pairs

    # -- retries -----------------------------------------------------------------------------------------------
    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        wait = self.backoff * 2 ** (state.attempt_number - 1)
        if isinstance(exc, _TransientHTTPError) and exc.retry_after is not None:
            wait = max(wait, exc.retry_after)
        return min(wait, self.max_backoff)

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.info("Jina rerank attempt %d failed (%s); retrying", state.attempt_number, self._redact(_describe(exc)))

    def _retry_args(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.max_retries + 1),
            "wait": self._wait,
            "retry": retry_if_exception(_retryable),
            "before_sleep": self._before_sleep,
            "reraise": True,
        }

    def _final_error(self, exc: BaseException) -> ModelError:
        if isinstance(exc, ModelError):
            return exc
        how = f"after {self.max_retries + 1} attempts" if _retryable(exc) else "(no connection; not retried)"
        return ModelError(f"Jina rerank at {self._redact(self._url)} failed {how}: {self._redact(_describe(exc))}")

    def _rerank_batch(self, client: httpx.Client, query: str, texts: list[str]) -> list[tuple[int, float]]:
        for attempt in Retrying(**self._retry_args()):
            with attempt:
                response = client.post(self._url, json=self._payload(query, texts), headers=self._headers())
                return self._parse(response, len(texts))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _arerank_batch(self, client: httpx.AsyncClient, query: str, texts: list[str]) -> list[tuple[int, float]]:
        async for attempt in AsyncRetrying(**self._retry_args()):
            with attempt:
                response = await client.post(self._url, json=self._payload(query, texts), headers=self._headers())
                return self._parse(response, len(texts))
        raise AssertionError("unreachable")  # pragma: no cover

    # -- BaseDocumentCompressor ----------------------------------------------------------------------------------
    def _batches(self, documents: Sequence[Document]) -> list[tuple[int, list[str]]]:
        texts = [rerank_text(d, self.include_context) for d in documents]
        return [(start, texts[start : start + self.batch_size]) for start in range(0, len(texts), self.batch_size)]

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Rerank ``documents`` for ``query``; best first, at most ``top_n``."""
        if not documents:
            return []
        scored: list[tuple[int, float]] = []
        try:
            with httpx.Client(timeout=self.timeout) as client:
                for start, texts in self._batches(documents):
                    scored.extend((start + i, s) for i, s in self._rerank_batch(client, query, texts))
        except Exception as exc:  # noqa: BLE001 - every failure degrades to the input order
            return self._fallback(documents, exc)
        return self._assemble(documents, scored)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """Async `compress_documents`: batches are sent concurrently (at most ``max_concurrency`` at once)."""
        if not documents:
            return []
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(client: httpx.AsyncClient, start: int, texts: list[str]) -> list[tuple[int, float]]:
            async with gate:
                return [(start + i, s) for i, s in await self._arerank_batch(client, query, texts)]

        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                parts = await asyncio.gather(*(one(client, s, t) for s, t in self._batches(documents)))
        except Exception as exc:  # noqa: BLE001 - every failure degrades to the input order
            return self._fallback(documents, exc)
        return self._assemble(documents, [pair for part in parts for pair in part])

    def _fallback(self, documents: Sequence[Document], exc: BaseException) -> list[Document]:
        error = self._final_error(exc)
        if self.strict:
            raise error from None
        want = len(documents) if self.top_n is None else min(self.top_n, len(documents))
        log.warning("reranking failed, keeping the input order of %d documents (the first %d): %s",
                    len(documents), want, error)
        return list(documents)[:want]

    def _assemble(self, documents: Sequence[Document], scored: list[tuple[int, float]]) -> list[Document]:
        want = len(documents) if self.top_n is None else min(self.top_n, len(documents))
        scored.sort(key=lambda pair: pair[1], reverse=True)  # stable: equal scores keep the input order
        out = [_with_score(documents[i], s) for i, s in scored[:want]]
        if len(out) < want:
            # the server returned fewer results than asked: fill up in input order rather than lose documents
            log.warning("Jina rerank returned %d results, expected %d; filling up in input order", len(out), want)
            taken = {i for i, _ in scored}
            out.extend(
                _with_score(d, None) for i, d in enumerate(documents) if i not in taken
            )
            out = out[:want]
        return out


def _with_score(doc: Document, score: float | None) -> Document:
    meta = dict(doc.metadata)
    meta[RERANK_SCORE] = score
    if score is not None:
        meta[SCORE] = score
    return Document(page_content=doc.page_content, metadata=meta, id=doc.id)


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    return str(detail)[:300]


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
