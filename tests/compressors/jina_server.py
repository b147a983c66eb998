"""A real HTTP server on 127.0.0.1 that speaks Jina's rerank protocol, with injectable faults, for tests.

Protocol (Jina's public API): ``POST /v1/rerank`` with ``{"model", "query", "documents", "top_n", "return_documents"}``
and ``Authorization: Bearer KEY``; answer ``{"model", "usage": {"total_tokens"}, "results": [{"index",
"relevance_score", "document": {"text"}}]}`` sorted by score, ``document`` only when ``return_documents`` is true.
Errors are ``{"detail": ...}`` with a 4xx/5xx status.

Relevance is the fraction of query terms (lower-cased words, single CJK characters) found in the document, so tests
can predict the order.

Faults are popped one per request from ``server.faults``: ``"429"`` (with ``Retry-After: 0``), ``"500"``,
``"timeout"`` (answers after ``server.delay`` seconds), ``"malformed"`` (200 with a body that is not JSON),
``"fewer"`` (one result fewer than asked), ``"bad_index"`` (an index out of range), ``"echo_key"`` (a 500 whose
detail echoes the Authorization header, as a careless proxy might).

Example::

    with JinaRerankServer(api_key="k") as server:
        server.faults.append("429")
        JinaReranker(base_url=server.url, api_key="k").compress_documents(docs, "q")
"""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TERMS = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]")


def relevance(query: str, document: str) -> float:
    """Share of the query's terms that occur in the document (0..1)."""
    terms = set(_TERMS.findall(query.lower()))
    if not terms:
        return 0.0
    doc_terms = set(_TERMS.findall(document.lower()))
    return len(terms & doc_terms) / len(terms)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)

    def _error(self, status: int, detail: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps({"detail": detail}).encode(), headers)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        auth = self.headers.get("Authorization")
        with owner.lock:
            owner.requests.append({"path": self.path, "headers": dict(self.headers), "body": raw})
            fault = owner.faults.pop(0) if owner.faults else None
        if self.path.rstrip("/") != "/v1/rerank":
            return self._error(404, f"no route {self.path}")
        if fault == "429":
            return self._error(429, "rate limit exceeded", {"Retry-After": "0"})
        if fault == "500":
            return self._error(500, "internal error")
        if fault == "echo_key":
            return self._error(500, f"upstream rejected header Authorization: {auth}")
        if fault == "timeout":
            time.sleep(owner.delay)
        if owner.api_key is not None and auth != f"Bearer {owner.api_key}":
            return self._error(401, "invalid or missing API key")
        if fault == "malformed":
            return self._send(200, b'{"results": [{"index": 0, "relevance_score": 0.5}')
        try:
            body = json.loads(raw)
        except ValueError:
            return self._error(400, "body is not JSON")
        problem = _check_request(body)
        if problem:
            return self._error(422, problem)
        docs = body["documents"]
        scores = [relevance(body["query"], d) for d in docs]
        order = sorted(range(len(docs)), key=lambda i: scores[i], reverse=True)
        top_n = body.get("top_n") or len(docs)
        order = order[:top_n]
        if fault == "fewer":
            order = order[: max(0, len(order) - 1)]
        results: list[dict[str, Any]] = []
        for i in order:
            item: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
            if body.get("return_documents", True):
                item["document"] = {"text": docs[i]}
            results.append(item)
        if fault == "bad_index" and results:
            results[0]["index"] = len(docs) + 5
        tokens = sum(len(d.split()) for d in docs) + len(body["query"].split())
        payload = {"model": body["model"], "usage": {"total_tokens": tokens}, "results": results}
        self._send(200, json.dumps(payload).encode())


def _check_request(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "body must be an object"
    if not isinstance(body.get("model"), str):
        return "field 'model' (string) is required"
    if not isinstance(body.get("query"), str):
        return "field 'query' (string) is required"
    docs = body.get("documents")
    if not isinstance(docs, list) or not all(isinstance(d, str) for d in docs):
        return "field 'documents' must be a list of strings"
    top_n = body.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or top_n < 1):
        return "field 'top_n' must be a positive integer"
    if "return_documents" in body and not isinstance(body["return_documents"], bool):
        return "field 'return_documents' must be a boolean"
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: JinaRerankServer


class JinaRerankServer:
    """Context manager running the server on a free port; ``url`` is the base URL (``http://127.0.0.1:PORT/v1``)."""

    def __init__(self, api_key: str | None = None, delay: float = 1.0) -> None:
        self.api_key = api_key
        self.delay = delay
        self.faults: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far."""
        return [json.loads(r["body"]) for r in self.requests]

    def __enter__(self) -> JinaRerankServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
