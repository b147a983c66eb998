"""The local storage engine: how a local knowledge base's indexes are committed, published and read back safely.

- `generations`: generation folders, the inter-process write lock, manifests, atomic writes, clean-up.
- `snapshots`: which generation a knowledge base object reads, and write sessions that commit the next one.
- `current`: index views that always read the newest committed generation.
- `segments`, `segment_checksums`: immutable segments with tombstones and the merge policy; their checksums.
- `leases`: reader leases, so clean-up never deletes a generation a reader may still open.
- `mapped`, `id_map`: memory-mapped index files that fail with a named error when damaged; chunk id <-> int id arrays.
- `external`: stores that persist themselves outside the commit (Chroma, Milvus), reconciled with it on open.

The index kinds (`ctxrag.stores.vectors`, `ctxrag.stores.bm25`, `ctxrag.stores.graph`) build on these modules; nothing
here imports an index kind. Import the modules themselves (this package exports nothing, so importing one loads no
other).
"""
