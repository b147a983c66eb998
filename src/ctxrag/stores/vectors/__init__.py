"""The dense vector backends of a local knowledge base, chosen by ``settings.dense_backend``.

- `dense`: FAISS (flat or HNSW) with tombstones and id-selector filters; `dense_segments`: FAISS as immutable
  segments of a generation.
- `chroma`, `milvus`: Chroma and Milvus (Lite or a server), which persist themselves and are reconciled with the
  committed chunks when opened (`ctxrag.stores.engine.external`).
- `backends`: ``settings.dense_backend`` -> how to make or load the dense index.
- `process_lock`: one process at a time on an embedded store (Chroma, Milvus Lite).

A knowledge base kept wholly in Milvus is `ctxrag.stores.milvus_resident`. Import the modules themselves (this package
exports nothing, so importing one loads no other).
"""
