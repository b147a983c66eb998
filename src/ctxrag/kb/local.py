"""The local knowledge-base backend (``settings.store="local"``): SQLite document store plus per-chunk indexes (dense FAISS, BM25, ...) kept in step.

A facade that wires the parts: the ingest pipeline (`ctxrag.indexing.pipeline`: load -> split -> contextualize ->
embed once -> extract graph triplets -> index), the index kinds (`ctxrag.stores.registry`), and the index generations
(`ctxrag.stores.engine.snapshots` and `ctxrag.stores.engine.generations`: write lock, commit, load, rollback).
Persistence: each commit writes every index into a fresh generation folder (``indexes/gen-N``), fsyncs it, and only
then commits the SQLite transaction that records ``N`` as current; a crash at any point leaves the previous generation
and the previous rows readable. No pickle anywhere.

Example::

    from ctxrag import KnowledgeBase, demo_corpus
    kb = KnowledgeBase.open("demo")
    report = kb.ingest([demo_corpus()])                   # the sample corpus shipped with ctxrag
    for doc in kb.search("星河知识库支持哪些文件格式？", k=3):
        print(doc.metadata["source"], doc.metadata["score"])
"""
from __future__ import annotations

import os
import threading
import uuid
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from langchain_core.documents import Document

from ctxrag.errors import DocumentNotFound, KnowledgeBaseNotFound, StoreCorruptError, warn_deprecated
from ctxrag.kb.base import BaseKnowledgeBase
from ctxrag.kb.registry import backend, validate_kb_name
from ctxrag.settings import Settings, get_settings
from ctxrag.stores.vectors.backends import drop_dense_store
from ctxrag.stores.base import ChunkIndex
from ctxrag.stores.documents.docstore import DocStore, DocumentRecord
from ctxrag.stores.documents.document_keys import require_document
from ctxrag.stores.filters import MetadataFilter
from ctxrag.fileio import remove_tree
from ctxrag.stores.engine.generations import GenerationStore
from ctxrag.stores.registry import IndexSetup, index_factories
from ctxrag.stores.engine.snapshots import IndexSnapshots, WriteSession
from ctxrag.stores.documents.chunk_lookup import DocStoreChunkLookup
from ctxrag.stores.engine.current import CurrentDenseIndex, CurrentKeywordIndex
from ctxrag.stores.protocols import ChunkLookup, DenseIndex, DocumentLookup, KeywordIndex

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.embeddings import Embeddings  # the embedding stack loads on first embed, not on import
    from ctxrag.indexing.sinks import GenerationSink
    from ctxrag.stores.graph import GraphIndex
    from ctxrag.kb.protocol import KnowledgeBaseProtocol
    from ctxrag.stores.consistency import CheckReport, RepairReport

TRASH_PREFIX = ".deleted-"
"""A deleted knowledge base's folder is renamed to ``.deleted-NAME-XXXX`` (not a valid name: never listed) and removed."""


class KnowledgeBase(BaseKnowledgeBase):
    """A named knowledge base under ``$CTXRAG_HOME/kb/NAME``. Use `KnowledgeBase.open`.

    Any number of processes may read and write it at once (see docs/reliability.md): writers take an inter-process
    lock, apply their change on top of the current generation and commit the next one; a long-lived reader checks
    for a newer generation on every index access (``PRAGMA data_version``, microseconds) and switches to it."""

    def __init__(
        self, name: str, root: Path, settings: Settings, embeddings: Embeddings | None = None, *, create: bool = True
    ) -> None:
        self.name = validate_kb_name(name)
        self.root = Path(root)
        self.settings = settings
        self._embeddings = embeddings
        self._lock = threading.RLock()
        """Held by the thread writing through this object (one writer thread per object)."""
        self.generations = GenerationStore(self.root, self.name, lock_timeout=settings.write_lock_timeout)
        db = self.root / "kb.sqlite"
        if not db.exists() and self.generations.committed():
            raise StoreCorruptError(
                f"{db}: the document store is missing but index generations exist in {self.generations.base}; "
                "restore kb.sqlite from a backup, or move the folder away and ingest again")
        self.store = DocStore(db, create=create)
        self.snapshots = IndexSnapshots(self.generations, self.store, factories=lambda: index_factories(self.index_setup()),
                                        embed=self._embed, writer_lock=self._lock)
        """The committed index generations: what searches read, and write sessions
        (`ctxrag.stores.engine.snapshots`)."""
        self._chunk_lookup = DocStoreChunkLookup(self.store, lambda: self.generation)

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(
        cls, name: str, settings: Settings | None = None, *, create: bool = True, embeddings: Embeddings | None = None
    ) -> KnowledgeBaseProtocol:
        """Open (and by default create) the knowledge base `name` in the store ``settings.store`` names
        (`ctxrag.kb.registry`): this class for ``local``, `MilvusKnowledgeBase` for ``milvus``. Indexes are loaded
        on first use."""
        s = settings or get_settings()
        validate_kb_name(name)
        chosen = backend(s.store)
        if not issubclass(cls, chosen):
            return chosen.open(name, s, create=create, embeddings=embeddings)
        root = s.kb_root / name
        if not (root / "kb.sqlite").exists() and not create and not (root / "indexes").is_dir():
            raise KnowledgeBaseNotFound(name, s.kb_root)
        return cls(name, root, s, embeddings, create=create)

    @classmethod
    def list_names(cls, settings: Settings | None = None) -> list[str]:
        """The knowledge bases in the store ``settings.store`` names, sorted."""
        s = settings or get_settings()
        chosen = backend(s.store)
        if not issubclass(cls, chosen):
            return chosen.list_names(s)
        if not s.kb_root.is_dir():
            return []
        return sorted(p.name for p in s.kb_root.iterdir() if (p / "kb.sqlite").exists())

    @classmethod
    def delete_kb(cls, name: str, settings: Settings | None = None) -> None:
        """Delete the knowledge base `name` (in the store ``settings.store`` names). Locally: under its write lock
        (waits for a writer's current commit, like any writer; a writer's next commit then fails with
        `KnowledgeBaseDeleted` instead of creating a new store), the folder is renamed away in one step, then
        removed. Readers see the whole knowledge base or none of it, and get `KnowledgeBaseDeleted` (not a raw
        ``FileNotFoundError``) on their next access."""
        s = settings or get_settings()
        root = s.kb_root / validate_kb_name(name)
        chosen = backend(s.store)
        if not issubclass(cls, chosen):
            return chosen.delete_kb(name, s)
        if not (root / "kb.sqlite").exists():
            raise KnowledgeBaseNotFound(name, s.kb_root)
        trash = s.kb_root / f"{TRASH_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        with GenerationStore(root, name, lock_timeout=s.write_lock_timeout).write_lock():
            if not (root / "kb.sqlite").exists():  # another `kb delete` got the lock first
                raise KnowledgeBaseNotFound(name, s.kb_root)
            drop_dense_store(s, name, root)  # a Milvus collection lives outside the folder (server or shared file)
            os.replace(root, trash)
        remove_tree(trash)

    def close(self) -> None:
        self.snapshots.close()
        self.store.close()

    def index_setup(self) -> IndexSetup:
        """What opening this knowledge base's indexes needs (`ctxrag.stores.registry`)."""
        extract = None
        if self.settings.graph:  # the triplet side loads the chat-model stack: only when graph RAG is on
            from ctxrag.indexing.triplets import LazyTripletExtractor

            extract = LazyTripletExtractor(self.settings)
        return IndexSetup(self.name, self.root, self.settings, chunks=self.store.iter_chunks,
                          embeddings=lambda: self.embeddings, embed=self._embed, extract_triplets=extract)

    @property
    def indexes(self) -> dict[str, ChunkIndex]:
        """The indexes of the newest committed generation (checked on every access; reloaded when a writer, in this
        process or another, committed a newer one). See `ctxrag.stores.engine.snapshots`."""
        return self.snapshots.current()

    def refresh(self) -> bool:
        """Switch to a newer committed generation now if there is one; True when it did."""
        return self.snapshots.refresh()

    @property
    def dense(self) -> DenseIndex:
        """Deprecated: `dense_index()` is the dense index (it follows new generations); ``indexes["dense"]`` is the
        current generation's index object (a `SegmentedDenseIndex` over FAISS, or a Chroma / Milvus index)."""
        warn_deprecated("kb.dense", "kb.dense_index() to search, kb.indexes['dense'] for the generation's object")
        index = self.indexes["dense"]
        if not isinstance(index, DenseIndex):  # pragma: no cover - every dense backend is one (tests/stores)
            raise TypeError(f"the dense index of {self.name!r} is a {type(index).__name__}, not a DenseIndex")
        return index

    @property
    def generation(self) -> int:
        return int(self.store.get_meta("generation") or 0)

    # -- ingest (`BaseKnowledgeBase.ingest`: `ctxrag.indexing.pipeline` writing to this sink) -------------------
    def ingest_sink(self) -> GenerationSink:
        """The document store and index generations as the pipeline's sink (`ctxrag.indexing.sinks`): each batch
        applied under the write lock and committed as the next generation; `import_precomputed` all or nothing
        (every batch in one write session and one generation; a bad record or any failure rolls everything back)."""
        from ctxrag.indexing.sinks import GenerationSink  # imported when first writing: opening and searching stay fast

        return GenerationSink(self.name, self.store, self.snapshots)

    # -- documents --------------------------------------------------------------------
    def list_documents(self) -> list[DocumentRecord]:
        return self.store.list_documents()

    def get_document(self, key: str) -> DocumentRecord:
        return require_document(self.store, key, self.name)

    def delete_document(self, key: str) -> DocumentRecord:
        """Delete a document (by id, source path or unique file name) from the store and every index."""
        doc = self.get_document(key)
        with self.snapshots.session() as session:
            if session.store.get_document(doc.doc_id) is None:  # deleted by another writer meanwhile
                raise DocumentNotFound(f"no document {key!r} in knowledge base {self.name!r} (deleted meanwhile)")
            session.delete([doc.doc_id])
            self.snapshots.commit(session)
        return doc

    def count(self) -> tuple[int, int]:
        """How many documents and chunks it holds (from the document store: no index is read)."""
        return self.store.count()

    def stats(self) -> dict[str, Any]:
        docs, chunks = self.count()
        return {"name": self.name, "path": str(self.root), "documents": docs, "chunks": chunks,
                "generation": self.generation, "indexes": {k: len(v) for k, v in self.indexes.items()}}

    # -- chunks: deprecated twins of `chunks` ------------------------------------------------------------------------
    def get_chunks(self, chunk_ids: list[str], scores: dict[str, dict[str, float]] | None = None) -> list[Document]:
        """Deprecated: ``kb.chunks.get_chunks``."""
        warn_deprecated("kb.get_chunks", "kb.chunks.get_chunks")
        return self._chunk_lookup.get_chunks(chunk_ids, scores)

    def all_chunks(self) -> list[Document]:
        """Deprecated: ``kb.chunks.all_chunks``."""
        warn_deprecated("kb.all_chunks", "kb.chunks.all_chunks")
        return self._chunk_lookup.all_chunks()

    def allowed_chunk_ids(self, filter: MetadataFilter | None) -> set[str] | None:
        """Deprecated: ``kb.chunks.allowed_chunk_ids``."""
        warn_deprecated("kb.allowed_chunk_ids", "kb.chunks.allowed_chunk_ids")
        return self._chunk_lookup.allowed_chunk_ids(filter)

    # -- read side for retrievers, routers, catalog (a `ctxrag.stores.protocols.KnowledgeSource`) ---------------------
    @property
    def chunks(self) -> ChunkLookup:
        """Chunks by id (``get_chunks``, ``all_chunks``) and the chunk ids a metadata filter allows
        (``allowed_chunk_ids``, cached per generation): the one way to a knowledge base's chunks."""
        return self._chunk_lookup

    @property
    def documents(self) -> DocumentLookup:
        """Whole documents, their chunks and stored summaries."""
        return self.store

    def dense_index(self) -> DenseIndex:
        """The dense index, following every newly committed generation: the one way to search it (``kb.indexes``
        holds the current generation's index objects, for maintenance and inspection)."""
        return CurrentDenseIndex(lambda: self.indexes, owner=self.name, newer_than=self.snapshots.newer_than)

    def keyword_index(self) -> KeywordIndex:
        """The BM25 index, following every newly committed generation."""
        return CurrentKeywordIndex(lambda: self.indexes, owner=self.name, newer_than=self.snapshots.newer_than)

    def graph_index(self) -> GraphIndex | None:
        """The graph index (`ctxrag.stores.graph.GraphIndex`) of the current generation, None when graph RAG is off
        (the merged view of its segments, `ctxrag.stores.graph.segmented`)."""
        graph: Any = self.indexes.get("graph")  # a segmented graph index, or None
        view: GraphIndex | None = getattr(graph, "view", graph)
        return view

    def set_summaries(self, summaries: dict[str, str]) -> None:
        """Store model-written document summaries (doc id -> summary) in one transaction."""
        with self._lock:
            self.store.begin()
            try:
                for doc_id, summary in summaries.items():
                    self.store.set_summary(doc_id, summary)
                self.store.commit()
            except BaseException:
                self.store.rollback()
                raise

    # -- LangChain VectorStore face (`ctxrag.kb.vectorstore`: it sees this class as a `VectorStoreTarget`) ----------
    def delete_documents(self, doc_ids: list[str]) -> list[str]:
        """Delete documents by id from the store and every index in one commit; unknown ids are ignored.
        Returns the ids that were deleted."""
        with self.snapshots.session() as session:
            deleted = [d for d in doc_ids if session.store.get_document(d) is not None]
            if not deleted:
                return []
            session.delete(deleted)
            self.snapshots.commit(session)
        return deleted

    # -- maintenance: ``kb check`` / ``kb repair`` (`ctxrag.kb.maintenance`, which sees this class as its
    # `MaintenanceTarget`: the methods below) ---------------------------------------------------------------------
    def check(self) -> CheckReport:
        """Each index of the current generation against the document store (`ctxrag.kb.maintenance.check`)."""
        from ctxrag.kb.maintenance import check

        return check(self)

    def repair(self) -> RepairReport:
        """Rebuild what is missing or damaged from the stored chunks (`ctxrag.kb.maintenance.repair`)."""
        from ctxrag.kb.maintenance import repair

        return repair(self)

    def stored_chunk_ids(self) -> set[str]:
        """Every chunk id in the document store."""
        return self.store.chunk_ids()

    def index_kinds(self) -> dict[str, Callable[[], ChunkIndex]]:
        """The index kinds this knowledge base keeps (`ctxrag.stores.registry`), each with how to make an empty one."""
        return {name: make for name, (make, _load) in self.snapshots.factories().items()}

    def saved_index(self, generation: int, name: str) -> ChunkIndex | None:
        """Index `name` as saved in `generation`, checked against its manifest (`IndexSnapshots.saved_index`): None
        when not saved there, `IndexCorruptError` when damaged."""
        return self.snapshots.saved_index(generation, name)

    def optimize(self) -> dict[str, tuple[int, int]]:
        """Merge each segmented index into one segment (``ctxrag kb optimize``, `IndexSnapshots.optimize`): index
        name -> (segments before, segments after)."""
        return self.snapshots.optimize()

    def repair_session(self) -> AbstractContextManager[WriteSession]:
        """A write session under the write lock with no index loaded: the repair brings each (`WriteSession.reindex`)."""
        return self.snapshots.session(repair=True)

    def commit(self, session: WriteSession) -> None:
        """Commit a write session as the next index generation (`IndexSnapshots.commit`)."""
        self.snapshots.commit(session)
