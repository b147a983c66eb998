"""The knowledge base contract: what every backend (`ctxrag.kb.local`, `ctxrag.kb.milvus`) offers and what the CLI,
the server, the chains and the tools may use of one.

Two protocols, as Haystack's ``DocumentStore`` and LangChain's ``VectorStore`` split the class from its instances:

- `KnowledgeBaseProtocol`: an open knowledge base. It is a `CatalogSource` (a `KnowledgeSource`, what retrievers
  and the catalog read, that hands out its document catalog: what routers and the Assistant read), a
  `VectorStoreTarget` (what the LangChain ``VectorStore`` face writes) and a `NoteHost` (where notes live,
  `ctxrag.kb.notes`), plus writes, documents, search and maintenance.
- `KnowledgeBaseBackend`: the class side, lifecycle by name (open or create, list, delete); the registry
  (`ctxrag.kb.registry`) maps each ``settings.store`` value to one.

Callers type against these, never against a backend class: ``def serve(kbs: Sequence[KnowledgeBaseProtocol])``.

Example::

    from ctxrag import demo_corpus
    from ctxrag.kb import KnowledgeBaseProtocol, open_kb
    kb: KnowledgeBaseProtocol = open_kb("demo")     # local or Milvus, as settings.store says
    kb.ingest([demo_corpus()], progress=False)
    kb.search("默认端口是多少？", k=3)                  # the default mode (hybrid) on every backend
    assert kb.check().clean
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ctxrag.enums import SearchMode
from ctxrag.ingest_report import IngestReport
from ctxrag.kb.notes import NoteHost
from ctxrag.retrievers.modes import DEFAULT_MODE
from ctxrag.settings import Settings
from ctxrag.stores.consistency import CheckReport, RepairReport
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.protocols import CatalogSource

if TYPE_CHECKING:  # pragma: no cover - langchain's retriever and embeddings load with the backends, not here
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool

    from ctxrag.indexing.bulk_import import PrecomputedDocument
    from ctxrag.indexing.contexts.strategies import ChunkContextualizer
    from ctxrag.kb.catalog import DocumentCatalog
    from ctxrag.kb.vectorstore import KnowledgeBaseVectorStore


class KnowledgeBaseProtocol(CatalogSource, NoteHost, Protocol):
    """An open knowledge base, whatever its backend (see the module docstring)."""

    name: str
    settings: Settings
    root: Path

    # -- lifecycle --------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release its files, connections and caches."""

    def __enter__(self) -> KnowledgeBaseProtocol: ...

    def __exit__(self, *exc: object) -> None: ...

    @property
    def generation(self) -> int:
        """The committed index generation (0 on a backend without generations)."""

    def refresh(self) -> bool:
        """Switch to a newer committed generation now; True when it did (False on a backend without them)."""

    def stats(self) -> dict[str, Any]:
        """Name, where it lives, document and chunk counts, generation and per-index sizes."""

    def count(self) -> tuple[int, int]:
        """How many documents and chunks it holds (from the document store: no index is read)."""

    # -- writes -----------------------------------------------------------------------------------------------
    def ingest(self, paths: Iterable[str | Path], *, contextualize: bool | None = None,
               contextualizer: ChunkContextualizer | None = None,
               precomputed_contexts: dict[str, str] | None = None, progress: bool = True,
               commit_every: int = 20) -> IngestReport:
        """Load, split, (contextualize,) embed and store files and folders (`ctxrag.indexing.pipeline`); a bad file is
        a ``failed`` outcome in the report, a given path that does not exist raises `ctxrag.errors.PathNotFound`."""

    def add_texts(self, items: Iterable[Any], *, contextualizer: ChunkContextualizer | None = None,
                  precomputed_contexts: dict[str, str] | None = None, progress: bool = False) -> IngestReport:
        """Store texts that are not files (dicts with ``text`` and ``source``, or `LoadedDocument`s)."""

    def import_precomputed(self, batches: Iterable[list[PrecomputedDocument]]) -> IngestReport:
        """Add documents whose chunks come with their vectors (no embedding model runs)."""

    def upsert_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]]) -> None:
        """Store already-chunked documents, replacing the same doc ids."""

    def delete_document(self, key: str) -> DocumentRecord:
        """Delete a document by id, source or unique file name; `DocumentNotFound` when there is none."""

    def delete_documents(self, doc_ids: list[str]) -> list[str]:
        """Delete documents by id; unknown ids are ignored. Returns the ids deleted."""

    # -- documents --------------------------------------------------------------------------------------------
    def list_documents(self) -> list[DocumentRecord]:
        """Every stored document."""

    def get_document(self, key: str) -> DocumentRecord:
        """A document by id, source or unique file name; `DocumentNotFound` when there is none."""

    # -- search -----------------------------------------------------------------------------------------------
    @property
    def embeddings(self) -> Embeddings:
        """The embedding model its dense index was built with."""

    def search(self, query: str, k: int = 10, *, mode: SearchMode | str = DEFAULT_MODE,
               filter: MetadataFilter | None = None) -> list[Document]:
        """Top-k chunks for `query` (default mode: `DEFAULT_MODE` on every backend)."""

    def as_retriever(self, mode: SearchMode | str = DEFAULT_MODE, k: int = 10, **kwargs: Any) -> BaseRetriever:
        """A LangChain retriever over this knowledge base (`ctxrag.retrievers.factory.make_retriever`)."""

    def as_tool(self, **kwargs: Any) -> BaseTool:
        """Its search as a LangChain tool for agents (`ctxrag.tools.make_search_tool`)."""

    def as_vectorstore(self) -> KnowledgeBaseVectorStore:
        """This knowledge base as a LangChain ``VectorStore``."""

    def catalog(self) -> DocumentCatalog:
        """Its document catalog (`ctxrag.kb.catalog`): a title and a summary per document, and vectors over them."""

    # -- maintenance ------------------------------------------------------------------------------------------
    def check(self) -> CheckReport:
        """Compare what is stored with every index (``ctxrag kb check``)."""

    def repair(self) -> RepairReport:
        """Bring every index in step with the stored documents (``ctxrag kb repair``)."""

    def optimize(self) -> dict[str, tuple[int, int]]:
        """Merge index segments (``ctxrag kb optimize``): index name -> (segments before, after)."""


class KnowledgeBaseBackend(Protocol):
    """A backend class: knowledge bases by name (``settings.store`` picks one in `ctxrag.kb.registry`)."""

    @classmethod
    def open(cls, name: str, settings: Settings, *, create: bool = True,
             embeddings: Embeddings | None = None) -> KnowledgeBaseProtocol:
        """Open (by default create) the knowledge base `name`; `KnowledgeBaseNotFound` when absent and not created."""

    @staticmethod
    def list_names(settings: Settings) -> list[str]:
        """The knowledge bases this backend holds under `settings`, sorted."""

    @staticmethod
    def delete_kb(name: str, settings: Settings) -> None:
        """Delete the knowledge base `name`; `KnowledgeBaseNotFound` when there is none."""
