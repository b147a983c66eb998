"""What both knowledge-base backends share, as langchain-core's ``VectorStore`` shares its defaults: the abstract read
and write side each backend implements (with its ingest sink), and the members written once on top of it (the
embedding model made on first use, the ingest pipeline and its entry points, ``search``, ``as_retriever``,
``as_vectorstore``, the context manager).

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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ctxrag.enums import SearchMode
from ctxrag.ingest_report import IngestReport
from ctxrag.retrievers.modes import DEFAULT_MODE
from ctxrag.settings import Settings
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.protocols import ChunkLookup, DenseIndex, DocumentLookup, KeywordIndex

if TYPE_CHECKING:  # pragma: no cover - the embedding stack and langchain's retriever load on first use, not on import
    from typing import Self

    import numpy as np
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool

    from ctxrag.indexing.bulk_import import PrecomputedDocument
    from ctxrag.indexing.contexts.strategies import ChunkContextualizer
    from ctxrag.indexing.pipeline import IngestPipeline
    from ctxrag.indexing.sinks import IngestSink
    from ctxrag.kb.catalog import DocumentCatalog
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
    def ingest_sink(self) -> IngestSink:
        """Where the ingest pipeline writes (`ctxrag.indexing.sinks`)."""

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

    # -- ingest: one pipeline for every backend (`ctxrag.indexing.pipeline`) ----------------------------------------
    def pipeline(self) -> IngestPipeline:
        """The ingest pipeline writing into this knowledge base's sink (with its current settings)."""
        from ctxrag.indexing.pipeline import IngestPipeline  # imported when first writing: opening stays fast
        from ctxrag.indexing.triplets import triplet_stage

        return IngestPipeline(self.name, self.settings, self.ingest_sink(), self._embed,
                              extract_triplets=triplet_stage(self.settings))

    def ingest(
        self,
        paths: Iterable[str | Path],
        *,
        contextualize: bool | None = None,
        contextualizer: ChunkContextualizer | None = None,
        precomputed_contexts: dict[str, str] | None = None,
        progress: bool = True,
        commit_every: int = 20,
    ) -> IngestReport:
        """Load, split, (contextualize,) embed and store files and folders, writing every `commit_every` documents.

        Contexts follow the same rule as ``ctxrag ingest``: `contextualize` (default: ``settings.contextualize``,
        ``CTXRAG_CONTEXTUALIZE``, on) gives chunks a context written as ``settings.context_strategy`` says; a given
        `contextualizer` or `precomputed_contexts` is used instead. A changed file replaces its chunks; an unchanged
        one is skipped by content hash; a bad file is reported in the returned `IngestReport` (never raised) and the
        others are still ingested. A path you give that does not exist raises `ctxrag.errors.PathNotFound` (a
        `FileNotFoundError`) before anything is written, as LangChain's loaders do: a typo or a relative path read
        from another folder is the caller's mistake, not a file to report.
        """
        if contextualizer is None and precomputed_contexts is None:
            contextualizer = self._default_contextualizer(contextualize, progress)
        return self.pipeline().ingest_files(paths, contextualizer=contextualizer,
                                            precomputed_contexts=precomputed_contexts, progress=progress,
                                            commit_every=commit_every)

    def _default_contextualizer(self, contextualize: bool | None, progress: bool) -> ChunkContextualizer | None:
        """The settings' contextualizer when contexts are on (`contextualize`, else ``settings.contextualize``)."""
        if not (self.settings.contextualize if contextualize is None else contextualize):
            return None
        from ctxrag.indexing.contexts.strategies import make_contextualizer

        return make_contextualizer(self.settings.context_strategy, settings=self.settings, show_progress=progress)

    def add_texts(
        self,
        items: Iterable[Any],
        *,
        contextualizer: ChunkContextualizer | None = None,
        precomputed_contexts: dict[str, str] | None = None,
        progress: bool = False,
    ) -> IngestReport:
        """Ingest texts that are not files (notes, records from an API): each item is a `LoadedDocument` or a dict
        with ``text``, ``source`` (a unique URI such as ``note://42``), optional ``title`` and ``metadata``."""
        return self.pipeline().add_texts(items, contextualizer=contextualizer,
                                         precomputed_contexts=precomputed_contexts, progress=progress)

    def import_precomputed(self, batches: Iterable[list[PrecomputedDocument]]) -> IngestReport:
        """Add documents whose chunks come with their vectors (`ctxrag.indexing.bulk_import`): no embedding model
        runs. A source already stored is replaced; an identical one is skipped; how much is one write is the sink's
        (`ingest_sink`)."""
        return self.pipeline().import_precomputed(batches)

    def upsert_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]]) -> None:
        """Store documents that come already chunked (no splitting, no context), replacing any with the same doc id
        (locally in one write session and one index generation)."""
        self.pipeline().upsert_chunked(documents)

    # -- search ---------------------------------------------------------------------------------------------------
    def search(self, query: str, k: int = 10, *, mode: SearchMode | str = DEFAULT_MODE,
               filter: MetadataFilter | None = None) -> list[Document]:
        """Top-k chunks for `query`, with ``score`` (and the mode's own score key) in metadata; the default mode is
        ``hybrid`` on every backend, as in `as_retriever`, ``ctxrag search`` and the server."""
        return self.as_retriever(mode=mode, k=k, filter=filter).invoke(query)

    def as_retriever(self, mode: SearchMode | str = DEFAULT_MODE, k: int = 10, **kwargs: Any) -> BaseRetriever:
        """A LangChain retriever over this knowledge base; see `ctxrag.retrievers.factory.make_retriever`."""
        from ctxrag.retrievers.factory import make_retriever

        return make_retriever(self, mode=mode, k=k, **kwargs)

    def as_tool(self, **kwargs: Any) -> BaseTool:
        """This knowledge base's search as a LangChain tool for agents; see `ctxrag.tools.make_search_tool`."""
        from ctxrag.tools import make_search_tool

        return make_search_tool([self], **kwargs)

    def as_vectorstore(self) -> KnowledgeBaseVectorStore:
        """This knowledge base as a LangChain `VectorStore` (`ctxrag.kb.vectorstore.KnowledgeBaseVectorStore`)."""
        from ctxrag.kb.vectorstore import KnowledgeBaseVectorStore  # loads langchain's VectorStore on first use only

        return KnowledgeBaseVectorStore(self)

    def catalog(self) -> DocumentCatalog:
        """Its document catalog (`ctxrag.kb.catalog.DocumentCatalog`), what the routers, the summarizer and the
        Assistant read when not given one: a new one each call, its summary vectors loaded from ``root/catalog``."""
        from ctxrag.kb.catalog import DocumentCatalog  # numpy and the embedding helpers load on first use only

        return DocumentCatalog(self)
