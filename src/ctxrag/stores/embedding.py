"""Stored chunk records -> `IndexedChunk`s with their passage vectors: the one "embed, then attach the vector" loop.

Every writer that fills a dense index goes through `embed_chunks`: ingest, `KnowledgeBase.upsert_chunked` (the
LangChain VectorStore face), rebuilding an index a generation lacks, reconciling Chroma/Milvus, and ``ctxrag kb
repair``; the evaluation runner, which builds FAISS over a whole corpus, uses `attach_vectors` in batches with a
progress bar. By default the texts are embedded in one call (the embedding model batches them itself).

Example::

    from ctxrag.models.embeddings import embed_array, make_embeddings
    from ctxrag.stores.documents.docstore import ChunkRecord
    from ctxrag.stores.embedding import embed_chunks
    emb = make_embeddings()
    record = ChunkRecord("d:0", "d", 0, "Falcon pumps", "Falcon pumps", None, {})
    [chunk] = embed_chunks([record], lambda texts: embed_array(emb, texts))
    chunk.vector.shape                                 # (384,)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ctxrag.errors import ModelError
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.documents.docstore import ChunkRecord

EmbedFn = Callable[[list[str]], np.ndarray]
"""Passage texts -> unit-normalised float32 vectors, one row per text (e.g. ``ctxrag.models.embeddings.embed_array``
bound to a model)."""


def to_indexed(record: ChunkRecord) -> IndexedChunk:
    """What an index receives for a stored chunk (its metadata copied, no vector yet)."""
    return IndexedChunk(record.chunk_id, record.doc_id, record.indexed_text, record.content, dict(record.metadata))


def embed_chunks(
    records: Iterable[ChunkRecord], embed: EmbedFn | None, *, batch_size: int | None = None, progress: bool = False,
    desc: str = "embedding",
) -> list[IndexedChunk]:
    """`IndexedChunk`s for `records`, each with its vector (`attach_vectors`); without `embed` (an index that needs
    no vectors) the chunks come back without vectors and no model runs."""
    chunks = [to_indexed(r) for r in records]
    if embed is None or not chunks:
        return chunks
    return attach_vectors(chunks, embed, batch_size=batch_size, progress=progress, desc=desc)


def attach_vectors(
    chunks: list[IndexedChunk], embed: EmbedFn, *, batch_size: int | None = None, progress: bool = False,
    desc: str = "embedding",
) -> list[IndexedChunk]:
    """Set each chunk's vector from `embed` over the chunks' texts: one call, or one per `batch_size` chunks with a
    progress bar (`progress`) counting chunks. Returns `chunks`."""
    from tqdm.auto import tqdm  # embedding only: opening a knowledge base never loads it

    step = batch_size or len(chunks) or 1
    bar = tqdm(total=len(chunks), desc=desc, unit="chunk", disable=not progress, leave=False)
    for start in range(0, len(chunks), step):
        part = chunks[start : start + step]
        vectors = embed([c.text for c in part])
        if len(vectors) != len(part):
            raise ModelError(f"embedding model returned {len(vectors)} vectors for {len(part)} chunks")
        for chunk, vector in zip(part, vectors):
            chunk.vector = vector
        bar.update(len(part))
    bar.close()
    return chunks
