"""What both knowledge-base backends share, as langchain-core's ``VectorStore`` shares its defaults: the abstract read
and write side each backend implements, and the members written once on top of it (the embedding model made on
first use, ``search``, ``as_retriever``, ``as_vectorstore``, the context manager).

Example::

    from ctxrag.kb.base import BaseKnowledgeBase
    from ctxrag.kb import KnowledgeBase
    kb = KnowledgeBase.open("demo")
    assert isinstance(kb, BaseKnowledgeBase)
    kb.search("默认端口是多少？", k=3)           # BaseKnowledgeBase.search: as_retriever(...).invoke(query)
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxrag.enums import SearchMode
from ctxrag.retrievers.modes import DEFAULT_MODE
from ctxrag.settings import Settings
from ctxrag.stores.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.protocols import ChunkLookup, DenseIndex, DocumentLookup, KeywordIndex

if TYPE_CHECKING:  # pragma: no cover - the embedding stack and langchain's retriever load on first use, not on import
    from typing import Self

    import numpy as np
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever

    from ctxrag.kb.vectorstore import KnowledgeBaseVectorStore
    from ctxrag.stores.graph import GraphIndex


class BaseKnowledgeBase(ABC):
    """The shared part of `ctxrag.kb.local.KnowledgeBase` and `ctxrag.kb.milvus.MilvusKnowledgeBase` (see the module
    docstring); the whole contract is `ctxrag.kb.protocol.KnowledgeBaseProtocol`."""

    name: str
    settings: Settings
    root: Path
    _embeddings: Embeddings | None

    # -- what each backend implements -----------------------------------------------------------------------------
    @abstractmethod
    def close(self) -> None:
        """Release files, connections and caches."""

    @property
    @abstractmethod
    def chunks(self) -> ChunkLookup:
        """Chunks by id and filters."""

    @property
    @abstractmethod
    def documents(self) -> DocumentLookup:
        """Whole documents and summaries."""

    @abstractmethod
    def dense_index(self) -> DenseIndex:
        """The dense index (following new commits)."""

    @abstractmethod
    def keyword_index(self) -> KeywordIndex:
        """The BM25 index (following new commits)."""

    @abstractmethod
    def graph_index(self) -> GraphIndex | None:
        """The graph index, None when graph RAG is off."""

    @abstractmethod
    def set_summaries(self, summaries: dict[str, str]) -> None:
        """Store model-written document summaries (doc id -> summary)."""

    @abstractmethod
    def upsert_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]]) -> None:
        """Store already-chunked documents, replacing the same doc ids."""

    @abstractmethod
    def delete_documents(self, doc_ids: list[str]) -> list[str]:
        """Delete documents by id; unknown ids are ignored. Returns the ids deleted."""

    # -- written once ---------------------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model `settings` name (or the one given at open), made on first use: opening a knowledge
        base and searching BM25 load none."""
        if self._embeddings is None:
            from ctxrag.models.embeddings import make_embeddings

            self._embeddings = make_embeddings(self.settings)
        return self._embeddings

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Passage vectors for indexing (the one embed function the pipeline and the stores are given)."""
        from ctxrag.models.embeddings import embed_array

        return embed_array(self.embeddings, texts)

    def search(self, query: str, k: int = 10, *, mode: SearchMode | str = DEFAULT_MODE,
               filter: MetadataFilter | None = None) -> list[Document]:
        """Top-k chunks for `query`, with ``score`` (and the mode's own score key) in metadata; the default mode is
        ``hybrid`` on every backend, as in `as_retriever`, ``ctxrag search`` and the server."""
        return self.as_retriever(mode=mode, k=k, filter=filter).invoke(query)

    def as_retriever(self, mode: SearchMode | str = DEFAULT_MODE, k: int = 10, **kwargs: Any) -> BaseRetriever:
        """A LangChain retriever over this knowledge base; see `ctxrag.retrievers.factory.make_retriever`."""
        from ctxrag.retrievers.factory import make_retriever

        return make_retriever(self, mode=mode, k=k, **kwargs)

    def as_vectorstore(self) -> KnowledgeBaseVectorStore:
        """This knowledge base as a LangChain `VectorStore` (`ctxrag.kb.vectorstore.KnowledgeBaseVectorStore`)."""
        from ctxrag.kb.vectorstore import KnowledgeBaseVectorStore  # loads langchain's VectorStore on first use only

        return KnowledgeBaseVectorStore(self)
