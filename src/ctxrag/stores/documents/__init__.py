"""The document store of a local knowledge base: documents, their chunks and the knowledge base's metadata.

- `docstore`: the SQLite store (`DocStore`, `ChunkRecord`, `DocumentRecord`).
- `chunk_lookup`: chunks as LangChain `Document`s by id, and the chunk ids a metadata filter allows (`ChunkLookup`).
- `document_keys`: the one rule for naming a stored document (id, exact source or a trailing part of its path),
  shared with the Milvus-resident store.

Import the modules themselves (this package exports nothing, so importing one loads no other).
"""
