"""The typed faces of the stores that retrievers, routers and chains read through (Haystack's document stores with
thin retrievers are the model): a retriever takes an index plus a `ChunkLookup`, never the knowledge base.

- `DenseIndex`: vectors by chunk id, searched by inner product (`FaissIndex`, `ChromaIndex`, `MilvusIndex`).
- `KeywordIndex`: BM25 over chunk texts (`BM25ChunkIndex`).
- `GraphStore`: entities, relations and passages of the knowledge graph (`GraphIndex`).
- `ChunkLookup`: chunks as LangChain `Document`s by id, and the chunk ids a metadata filter allows
  (`ctxrag.stores.documents.chunk_lookup.DocStoreChunkLookup`).
- `DocumentLookup`: whole documents, their chunks and stored summaries (`DocStore`).
- `KnowledgeSource`: what a knowledge base offers readers (the pieces above plus its name, settings and embedding
  model); `KnowledgeBase` is one, and `make_retriever` takes any.
- `DocumentCatalogView` and `CatalogSource`: what the routers, the summarizer and the Assistant read of a document
  catalog, and a `KnowledgeSource` that hands one out (`ctxrag.kb.catalog.DocumentCatalog`, ``kb.catalog()``).

Every index also is a `ChunkIndex` (add, delete, save; `ctxrag.stores.base`); each kind loads with its own
``load(directory, ...)`` classmethod. A search takes ``allowed_chunk_ids`` (from `ChunkLookup.allowed_chunk_ids`) so
the filter is applied inside the index before the top-k cut.

Example::

    from ctxrag import KnowledgeBase
    kb = KnowledgeBase.open("demo")
    dense: DenseIndex = kb.dense_index()            # follows new generations
    allowed = kb.chunks.allowed_chunk_ids({"file_type": "markdown"})
    hits = dense.search(query_vector, 5, allowed_chunk_ids=allowed)
    docs = kb.chunks.get_chunks([cid for cid, _ in hits])
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from langchain_core.documents import Document

from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.filters import MetadataFilter as MetadataFilter  # the old import path, kept

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.embeddings import Embeddings
    from ctxrag.settings import Settings
    from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord, DocumentRow
    from ctxrag.stores.graph import GraphIndex


ChunkScores = dict[str, dict[str, float]]
"""Per chunk id, the score keys to add to that chunk's metadata (``{"score": ..., "dense_score": ...}``)."""


@runtime_checkable
class DenseIndex(Protocol):
    """Vectors by chunk id, searched by inner product on unit vectors."""

    name: str

    def add(self, chunks: list[IndexedChunk]) -> None:
        """Add chunks (``chunk.vector`` set); a chunk id already present is replaced."""

    def delete(self, chunk_ids: list[str]) -> None:
        """Remove chunks; unknown ids are ignored."""

    def search(
        self, vector: np.ndarray, k: int, allowed_chunk_ids: AbstractSet[str] | None = None
    ) -> list[tuple[str, float]]:
        """Top-k ``(chunk_id, cosine)`` for a unit query vector, only among `allowed_chunk_ids` when given."""

    def vectors(self, chunk_ids: list[str]) -> np.ndarray:
        """Stored vectors of these chunks, in order; `KeyError` for an unknown id."""

    def save(self, directory: Path) -> None:
        """Write the index into `directory` (a self-persisting backend records only where it lives)."""

    def __len__(self) -> int: ...


@runtime_checkable
class KeywordIndex(Protocol):
    """BM25 over chunk texts."""

    name: str

    def add(self, chunks: list[IndexedChunk]) -> None:
        """Add chunks (``chunk.text`` is indexed); a chunk id already present is replaced."""

    def delete(self, chunk_ids: list[str]) -> None:
        """Remove chunks; unknown ids are ignored."""

    def search(
        self, query: str, k: int, allowed_chunk_ids: Iterable[str] | None = None, *, fill: bool = False
    ) -> list[tuple[str, float]]:
        """Best `k` ``(chunk_id, bm25 score)``; with `fill`, zero-score chunks in index order up to `k`."""

    def save(self, directory: Path) -> None:
        """Write the index into `directory`."""

    def __len__(self) -> int: ...


@runtime_checkable
class GraphStore(Protocol):
    """The knowledge graph as Graph RAG reads it: entity and relation search, and the passages behind relations."""

    name: str

    def add(self, chunks: list[IndexedChunk]) -> None:
        """Add chunks with their triplets (``metadata["triplets"]`` or extracted)."""

    def delete(self, chunk_ids: list[str]) -> None:
        """Remove passages, and relations and entities left without one."""

    def search_entities(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The `k` entities most similar to a unit vector, ``(entity_id, cosine)``, best first."""

    def search_relations(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The `k` relations most similar to a unit vector, ``(relation_id, cosine)``, best first."""

    def relation_passages(self, relation_id: int) -> list[str]:
        """Passages (chunk ids) the relation was extracted from."""

    def passage_metadata(self, passage_id: str) -> dict[str, Any]:
        """Metadata of a passage (for filters)."""

    def save(self, directory: Path) -> None:
        """Write the graph into `directory`."""

    def __len__(self) -> int: ...


@runtime_checkable
class ChunkLookup(Protocol):
    """Chunks by id and the ids a metadata filter allows: what every retriever reads besides its index."""

    def get_chunks(self, chunk_ids: Sequence[str], scores: ChunkScores | None = None) -> list[Document]:
        """Documents for these chunk ids, in the given order (unknown ids skipped), `scores` merged into metadata."""

    def allowed_chunk_ids(self, filter: MetadataFilter | None) -> AbstractSet[str] | None:
        """Chunk ids whose metadata match `filter`; None when `filter` is None (everything allowed)."""


@runtime_checkable
class DocumentLookup(Protocol):
    """Whole documents for the catalog, the summarizer and the Assistant."""

    def get_document(self, doc_id: str) -> DocumentRecord | None:
        """The document with this id, or None."""

    def chunks_of(self, doc_id: str) -> list[ChunkRecord]:
        """The document's chunks in order."""

    def list_documents(self) -> list[DocumentRecord]:
        """Every document, with its text."""

    def document_rows(self) -> list[DocumentRow]:
        """Every document without its text (id, source, title, stored summary, content hash), ordered by source."""

    def get_summary(self, doc_id: str) -> str | None:
        """The stored summary of a document ("" when none), None when there is no such document."""


@runtime_checkable
class KnowledgeSource(Protocol):
    """What a knowledge base offers its readers; `ctxrag.KnowledgeBase` implements it."""

    name: str
    settings: Settings
    root: Path

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model its dense index was built with (queries must use the same)."""

    @property
    def chunks(self) -> ChunkLookup:
        """Chunks by id and filters."""

    @property
    def documents(self) -> DocumentLookup:
        """Whole documents and summaries."""

    def dense_index(self) -> DenseIndex:
        """The dense index, following new committed generations."""

    def keyword_index(self) -> KeywordIndex:
        """The BM25 index, following new committed generations; searching raises when the base has none."""

    def graph_index(self) -> GraphIndex | None:
        """The graph index of the current generation, None when graph RAG is off."""

    def set_summaries(self, summaries: dict[str, str]) -> None:
        """Store model-written document summaries (doc id -> summary) in one transaction."""


class CatalogEntryView(Protocol):
    """One document as a catalog lists it."""

    doc_id: str
    title: str
    summary: str


class DocumentCatalogView(Protocol):
    """What the routers, the summarizer and the Assistant read of a document catalog (titles and summaries, and a
    vector index over them): `ctxrag.kb.catalog.DocumentCatalog` is one."""

    def entries(self, doc_ids: Iterable[str] | None = None) -> Sequence[CatalogEntryView]:
        """Catalog entries (all, or these documents in the given order)."""

    def search(self, query: str, k: int = 5, doc_ids: Iterable[str] | None = None) -> list[tuple[str, float]]:
        """Top-k documents for `query` by catalog similarity: [(doc_id, cosine)]."""

    def coverage(self, query: str, doc_ids: Iterable[str] | None = None, *,
                 query_vector: np.ndarray | None = None) -> float:
        """How well the knowledge base (or these documents) covers `query`: the max catalog cosine."""


@runtime_checkable
class CatalogSource(KnowledgeSource, Protocol):
    """A `KnowledgeSource` that keeps a document catalog: what the routers, the summarizer and the Assistant take
    (every knowledge base backend is one)."""

    def catalog(self) -> DocumentCatalogView:
        """A document catalog of this knowledge base."""
