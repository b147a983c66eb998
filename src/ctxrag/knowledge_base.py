"""A named knowledge base: SQLite document store plus per-chunk indexes (dense FAISS, BM25, ...) kept in step.

Data flow at ingest: load -> split -> contextualize (optional) -> embed -> add to every index -> atomic commit.
Persistence: each commit writes every index into a fresh generation folder (``indexes/gen-N``), fsyncs it, and only then
commits the SQLite transaction that records ``N`` as current; a crash at any point leaves the previous generation
and the previous rows readable. No pickle anywhere.

Example::

    from ctxrag import KnowledgeBase
    kb = KnowledgeBase.open("demo")
    report = kb.ingest(["examples/sample_corpus"])
    for doc in kb.search("星河知识库支持哪些文件格式？", k=3):
        print(doc.metadata["source"], doc.metadata["score"])
"""
from __future__ import annotations

import functools
import logging
import re
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Literal

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from tqdm.auto import tqdm

from ctxrag import schema
from ctxrag.ingest_report import FileOutcome, IngestReport
from ctxrag.errors import ConfigError, DocumentNotFound, KnowledgeBaseNotFound, LoadError, StoreCorruptError
from ctxrag.models.embeddings import embed_array, make_embeddings
from ctxrag.settings import Settings, get_settings
from ctxrag.stores.backends import SelfPersistingIndex, reconcile
from ctxrag.stores.base import ChunkIndex, IndexedChunk
from ctxrag.stores.chunk_lookup import DocStoreChunkLookup
from ctxrag.stores.current import CurrentDenseIndex, CurrentKeywordIndex
from ctxrag.stores.dense import FaissIndex
from ctxrag.stores.docstore import ChunkRecord, DocStore, DocumentRecord
from ctxrag.stores.generations import GenerationStore
from ctxrag.stores.protocols import ChunkLookup, DenseIndex, DocumentLookup, KeywordIndex
from ctxrag.stores.snapshots import IndexSnapshots, WriteSession, missing_from
from ctxrag.indexing.prepared import PreparedDocument, apply_prepared, reindex_reason

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.indexing.bulk_import import PrecomputedDocument
    from ctxrag.stores.graph import GraphIndex

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"[A-Za-z0-9\u4e00-\u9fff][\w\u4e00-\u9fff.-]{0,63}")  # fullmatch: no trailing newline
SearchMode = Literal["dense", "bm25", "hybrid"]


def validate_kb_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name in {".", ".."}:
        raise ConfigError(
            f"invalid knowledge base name {name!r}: use 1-64 letters, digits, CJK, '_', '-', '.', starting with a letter or digit"
        )
    return name


def _index_factories(kb: "KnowledgeBase | None" = None) -> dict[str, tuple[Callable[[], ChunkIndex], Callable[[Path], ChunkIndex | None]]]:
    """Index kinds a knowledge base keeps: name -> (make empty, load from folder; None means rebuild).

    The dense index is the one ``kb.settings.vector_store`` names (FAISS without a `kb`); see `ctxrag.stores.backends`."""
    if kb is None:
        dense: tuple[Callable[[], Any], Callable[[Path], Any]] = (FaissIndex, FaissIndex.load)
    else:
        from ctxrag.stores.backends import dense_factories

        dense = dense_factories(kb)
    factories: dict[str, tuple[Callable[[], ChunkIndex], Callable[[Path], ChunkIndex | None]]] = {"dense": dense}
    try:
        from ctxrag.stores.bm25 import BM25ChunkIndex
    except ImportError:  # pragma: no cover - bm25 ships with ctxrag; guard for partial installs
        pass
    else:
        factories["bm25"] = (BM25ChunkIndex, BM25ChunkIndex.load)
    if kb is not None and kb.settings.graph:
        factories["graph"] = _graph_factories(kb)
    return factories


def _graph_factories(kb: "KnowledgeBase") -> tuple[Callable[[], Any], Callable[[Path], Any]]:
    """Graph RAG index (opt-in, ``CTXRAG_GRAPH=true``): triplets from ``metadata["triplets"]`` or, failing that,
    extracted by the configured chat model, which is only built when a chunk needs it."""
    from ctxrag.stores.graph import GraphIndex

    extractor = _LazyTripletExtractor(kb.settings)
    return (
        lambda: GraphIndex(kb.embeddings, extractor=extractor, show_progress=False),
        lambda d: GraphIndex.load(d, kb.embeddings, extractor=extractor, show_progress=False),
    )


class _LazyTripletExtractor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._inner: Any = None

    def __call__(self, text: str) -> Any:
        if self._inner is None:
            from ctxrag.graph import TripletExtractor
            from ctxrag.models.chat import make_chat_model

            self._inner = TripletExtractor(make_chat_model(self.settings))
        return self._inner(text)


class KnowledgeBase:
    """A named knowledge base under ``$CTXRAG_HOME/kb/NAME``. Use `KnowledgeBase.open`.

    Any number of processes may read and write it at once (see docs/reliability.md): writers take an inter-process
    lock, apply their change on top of the current generation and commit the next one; a long-lived reader checks
    for a newer generation on every index access (``PRAGMA data_version``, microseconds) and switches to it."""

    def __init__(self, name: str, root: Path, settings: Settings, embeddings: Embeddings | None = None) -> None:
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
        self.store = DocStore(db)
        self._snapshots = IndexSnapshots(
            self.generations, self.store, factories=lambda: _index_factories(self), reconcile=self._reconcile,
            embed=lambda texts: embed_array(self.embeddings, texts), writer_lock=self._lock)
        self._session: WriteSession | None = None
        self._chunk_lookup = DocStoreChunkLookup(self.store, lambda: self.generation)

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(
        cls, name: str, settings: Settings | None = None, *, create: bool = True, embeddings: Embeddings | None = None
    ) -> "KnowledgeBase":
        """Open (and by default create) the knowledge base `name`. Indexes are loaded on first use."""
        s = settings or get_settings()
        validate_kb_name(name)
        root = s.kb_root / name
        if not (root / "kb.sqlite").exists() and not create and not (root / "indexes").is_dir():
            raise KnowledgeBaseNotFound(name, s.kb_root)
        return cls(name, root, s, embeddings)

    @staticmethod
    def list_names(settings: Settings | None = None) -> list[str]:
        s = settings or get_settings()
        if not s.kb_root.is_dir():
            return []
        return sorted(p.name for p in s.kb_root.iterdir() if (p / "kb.sqlite").exists())

    @staticmethod
    def delete_kb(name: str, settings: Settings | None = None) -> None:
        s = settings or get_settings()
        root = s.kb_root / validate_kb_name(name)
        if not (root / "kb.sqlite").exists():
            raise KnowledgeBaseNotFound(name, s.kb_root)
        if s.vector_store == "milvus" and s.milvus_uri:  # its collection lives outside the folder (server or shared file)
            from ctxrag.stores.milvus import MilvusIndex

            index = MilvusIndex.for_knowledge_base(name, root, s)
            try:
                index.drop()
            finally:
                index.close()
        shutil.rmtree(root)

    def close(self) -> None:
        self._snapshots.close()
        self.store.close()

    def __enter__(self) -> "KnowledgeBase":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def embeddings(self) -> Embeddings:
        if self._embeddings is None:
            self._embeddings = make_embeddings(self.settings)
        return self._embeddings

    @property
    def indexes(self) -> dict[str, ChunkIndex]:
        """The indexes of the newest committed generation (checked on every access; reloaded when a writer, in this
        process or another, committed a newer one). See `ctxrag.stores.snapshots`."""
        return self._snapshots.current()

    def refresh(self) -> bool:
        """Switch to a newer committed generation now if there is one; True when it did."""
        return self._snapshots.refresh()

    @property
    def dense(self) -> FaissIndex:
        return self.indexes["dense"]  # type: ignore[return-value]

    @property
    def generation(self) -> int:
        return int(self.store.get_meta("generation") or 0)

    def _gen_dir(self, gen: int) -> Path:
        return self.generations.gen_dir(gen)

    def _reconcile(self, index: ChunkIndex) -> None:
        try:
            reconcile(index, self)  # type: ignore[arg-type]
        except Exception as e:  # noqa: BLE001 - the write's own error matters more; the next open reconciles
            log.warning("knowledge base %r: reconciling %s after a failed write failed: %s",
                        self.name, type(index).__name__, e)

    @contextmanager
    def _write_session(self) -> Iterator[WriteSession]:
        """Write lock + private indexes of the current generation; `_commit` publishes (see `IndexSnapshots`)."""
        with self._snapshots.session() as session:
            self._session = session
            try:
                yield session
            finally:
                self._session = None

    def _commit(self) -> None:
        """Commit the open write session as the next generation."""
        if self._session is None:
            raise RuntimeError("_commit outside a write session")
        self._snapshots.commit(self._session)

    # -- ingest -----------------------------------------------------------------------
    def ingest(
        self,
        paths: Iterable[str | Path],
        *,
        contextualizer: Any = None,
        precomputed_contexts: dict[str, str] | None = None,
        progress: bool = True,
        commit_every: int = 20,
    ) -> IngestReport:
        """Load, split, (contextualize,) embed and index files and folders.

        A changed file replaces its chunks; an unchanged one is skipped by content hash; a bad file is reported in the
        returned `IngestReport` (never raised) and the others are still ingested.
        """
        from ctxrag.loading import expand_paths, load_file

        report = IngestReport()
        files, errors = expand_paths([Path(p) for p in paths])
        for e in errors:
            report.files.append(FileOutcome(e.path, "failed", e.reason))
        limited = functools.partial(load_file, max_bytes=self.settings.max_file_bytes)
        self._ingest_many(
            files, lambda path: self._prepare(limited(path), contextualizer, precomputed_contexts), report,
            desc=f"ingest {self.name}", unit="file", progress=progress, commit_every=commit_every,
        )
        if contextualizer is not None and hasattr(contextualizer, "report"):
            report.context_report = contextualizer.report()
        return report

    def add_texts(
        self,
        items: Iterable[Any],
        *,
        contextualizer: Any = None,
        precomputed_contexts: dict[str, str] | None = None,
        progress: bool = False,
    ) -> IngestReport:
        """Ingest texts that are not files (notes, records from an API): each item is a `LoadedDocument` or a dict
        with ``text``, ``source`` (a unique URI such as ``note://42``), optional ``title`` and ``metadata``."""
        from ctxrag.loading import LoadedDocument

        report = IngestReport()
        docs = []
        for i, item in enumerate(items):
            if isinstance(item, dict):
                if not isinstance(item.get("text"), str) or not isinstance(item.get("source"), str) or not item["source"]:
                    raise ConfigError(f"add_texts item {i}: needs string fields 'text' and 'source', got keys {sorted(item)}")
                item = LoadedDocument(item["text"], item["source"], item.get("title") or item["source"],
                                      dict(item.get("metadata") or {}, file_type=item.get("file_type", "text")))
            docs.append(item)
        def one(loaded: Any) -> "FileOutcome | PreparedDocument":
            if not loaded.text.strip():
                raise LoadError(loaded.source, "empty text")
            return self._prepare(loaded, contextualizer, precomputed_contexts)

        self._ingest_many(docs, one, report, desc=f"add {self.name}", unit="doc", progress=progress)
        return report

    def import_precomputed(self, batches: Iterable[list[PrecomputedDocument]]) -> IngestReport:
        """Add documents whose chunks come with their vectors (`ctxrag.indexing.bulk_import`): no embedding model runs.

        All or nothing: every batch is written in one write session and committed as one new index generation; a bad
        record (the reader raises) or any failure rolls everything back. A source already stored is replaced; an
        identical one is skipped."""
        report = IngestReport()
        with self._write_session() as session:
            for batch in batches:
                indexed: list[IndexedChunk] = []
                for item in batch:
                    doc = item.document
                    old = session.store.get_document(doc.doc_id)
                    if old is not None and old.content_hash == doc.content_hash:
                        report.files.append(FileOutcome(doc.source, "skipped", "unchanged (same content hash)",
                                                        doc.doc_id, old.n_chunks))
                        continue
                    if old is not None:
                        old_ids = [c.chunk_id for c in session.store.chunks_of(doc.doc_id)]
                        for index in session.indexes.values():
                            index.delete(old_ids)
                    for record, vector in zip(item.chunks, item.vectors):
                        chunk = self._to_indexed(record)
                        chunk.vector = vector
                        indexed.append(chunk)
                    session.store.upsert_document(doc, item.chunks)
                    report.files.append(FileOutcome(doc.source, "updated" if old else "added", "", doc.doc_id,
                                                    len(item.chunks)))
                for index in session.indexes.values():
                    index.add(indexed)
            if report.added or report.updated:
                self._commit()
        return report

    def _ingest_many(
        self, items: list[Any], prepare: Callable[[Any], "FileOutcome | PreparedDocument"], report: IngestReport, *,
        desc: str, unit: str, progress: bool, commit_every: int = 1_000_000,
    ) -> None:
        """Prepare items one by one outside the write lock (a `LoadError` fails that item only), then apply and
        commit them under the lock every `commit_every` changes; outcomes keep the order of `items`."""
        batch: list[FileOutcome | PreparedDocument] = []
        pending = 0
        for item in tqdm(items, desc=desc, unit=unit, disable=not progress):
            try:
                outcome = prepare(item)
            except LoadError as e:
                outcome = FileOutcome(e.path, "failed", e.reason)
            batch.append(outcome)
            if isinstance(outcome, PreparedDocument):
                pending += 1
                if pending >= commit_every:
                    self._apply(batch, report)
                    batch, pending = [], 0
        self._apply(batch, report)

    def _apply(self, batch: list["FileOutcome | PreparedDocument"], report: IngestReport) -> None:
        """Under the write lock: re-check each prepared document against the current store (another writer may
        have stored it meanwhile), replace its chunks in every index and the store, and commit one generation."""
        if not any(isinstance(x, PreparedDocument) for x in batch):
            report.files.extend(x for x in batch if isinstance(x, FileOutcome))
            return
        outcomes: list[FileOutcome] = []
        with self._write_session() as session:
            changed = 0
            for item in batch:
                if isinstance(item, FileOutcome):
                    outcomes.append(item)
                    continue
                outcome = apply_prepared(session, item)
                changed += outcome.status in ("added", "updated")
                outcomes.append(outcome)
            if changed:
                self._commit()
        report.files.extend(outcomes)

    def _prepare(self, loaded: Any, contextualizer: Any, precomputed: dict[str, str] | None) -> "FileOutcome | PreparedDocument":
        """Split, contextualize and embed a loaded document (no lock held); an unchanged, fully indexed one is
        skipped, one stored but missing from an index is indexed again."""
        source = loaded.source
        doc_id = schema.make_doc_id(self.name, source)
        chash = schema.content_hash(loaded.text)
        old = self.store.get_document(doc_id)
        reason = ""
        if old is not None and old.content_hash == chash:
            missing = missing_from(self.indexes, [c.chunk_id for c in self.store.chunks_of(doc_id)])
            if not missing:
                return FileOutcome(source, "skipped", "unchanged (same content hash)", doc_id, old.n_chunks)
            reason = reindex_reason(missing)
        meta = dict(loaded.metadata)
        records = self._make_chunks(doc_id, source, loaded.title, loaded.text, meta, contextualizer, precomputed)
        if not records:
            raise LoadError(source, "no text to index after splitting")
        indexed = [self._to_indexed(r) for r in records]
        vecs = embed_array(self.embeddings, [c.text for c in indexed])
        for c, v in zip(indexed, vecs):
            c.vector = v
        warnings = list(getattr(loaded, "warnings", []))  # e.g. malformed JSONL lines skipped
        return PreparedDocument(doc_id, source, loaded.title, chash, loaded.text, meta, records, indexed, reason,
                                warnings=warnings)

    def _splitter(self) -> Any:
        from ctxrag.loading import ChunkSplitter

        c = self.settings.chunking
        return ChunkSplitter(chunk_size=c.chunk_size, chunk_overlap=c.chunk_overlap, unit=c.unit)

    def _make_chunks(
        self, doc_id: str, source: str, title: str, text: str, meta: dict[str, Any],
        contextualizer: Any, precomputed: dict[str, str] | None,
    ) -> list[ChunkRecord]:
        splitter = self._splitter()
        mode = "code" if meta.get("language") else "text"
        try:
            pieces = splitter.split_text(text, mode=mode)
        except TypeError:
            pieces = splitter.split_text(text)
        contexts: list[str | None] = [None] * len(pieces)
        if precomputed:
            contexts = [precomputed.get(schema.make_chunk_id(doc_id, p.index)) for p in pieces]
        elif contextualizer is not None and pieces:
            contexts = list(contextualizer.contextualize_document(
                text, [p.text for p in pieces], title=title, heading_paths=[p.heading_path for p in pieces],
                offsets=[p.start_index for p in pieces],
            ))
        out = []
        for p, ctx in zip(pieces, contexts):
            cid = schema.make_chunk_id(doc_id, p.index)
            indexed_text = f"{ctx}\n\n{p.text}" if ctx else p.text
            md = {
                schema.CHUNK_ID: cid, schema.DOC_ID: doc_id, schema.KB: self.name, schema.SOURCE: source,
                schema.TITLE: title, schema.CHUNK_INDEX: p.index, schema.START_INDEX: p.start_index,
                schema.END_INDEX: p.end_index, schema.HEADING_PATH: p.heading_path,
            }
            for key in ("file_type", "language", "collection", "tags", "note_id"):  # collection/tags: notes filter
                if key in meta:
                    md[key] = meta[key]
            if ctx:
                md[schema.CONTEXT] = ctx
            out.append(ChunkRecord(cid, doc_id, p.index, p.text, indexed_text, ctx, md))
        return out

    @staticmethod
    def _to_indexed(r: ChunkRecord) -> IndexedChunk:
        return IndexedChunk(r.chunk_id, r.doc_id, r.indexed_text, r.content, dict(r.metadata))

    # -- documents --------------------------------------------------------------------
    def list_documents(self) -> list[DocumentRecord]:
        return self.store.list_documents()

    def get_document(self, key: str) -> DocumentRecord:
        doc = self.store.find_document(key)
        if doc is None:
            raise DocumentNotFound(f"no document {key!r} in knowledge base {self.name!r} (see `ctxrag doc list --kb {self.name}`)")
        return doc

    def delete_document(self, key: str) -> DocumentRecord:
        """Delete a document (by id, source path or unique file name) from the store and every index."""
        doc = self.get_document(key)
        with self._write_session() as session:
            if session.store.get_document(doc.doc_id) is None:  # deleted by another writer meanwhile
                raise DocumentNotFound(f"no document {key!r} in knowledge base {self.name!r} (deleted meanwhile)")
            ids = session.store.delete_document(doc.doc_id)
            for index in session.indexes.values():
                index.delete(ids)
            self._commit()
        return doc

    def stats(self) -> dict[str, Any]:
        docs, chunks = self.store.count()
        return {"name": self.name, "path": str(self.root), "documents": docs, "chunks": chunks,
                "generation": self.generation, "indexes": {k: len(v) for k, v in self.indexes.items()}}

    # -- chunks -----------------------------------------------------------------------
    def get_chunks(self, chunk_ids: list[str], scores: dict[str, dict[str, float]] | None = None) -> list[Document]:
        """Documents for these chunk ids, in the given order (unknown ids are skipped)."""
        return self._chunk_lookup.get_chunks(chunk_ids, scores)

    def all_chunks(self) -> list[Document]:
        return self._chunk_lookup.all_chunks()

    def allowed_chunk_ids(self, filter: dict[str, Any] | Callable[[dict[str, Any]], bool] | None) -> set[str] | None:
        """Chunk ids whose metadata match `filter` (dict: key -> value or list of values; or a predicate)."""
        return self._chunk_lookup.allowed_chunk_ids(filter)

    # -- read side for retrievers, routers, catalog (a `ctxrag.stores.protocols.KnowledgeSource`) ---------------------
    @property
    def chunks(self) -> ChunkLookup:
        """Chunks by id and the chunk ids a metadata filter allows (cached per generation)."""
        return self._chunk_lookup

    @property
    def documents(self) -> DocumentLookup:
        """Whole documents, their chunks and stored summaries."""
        return self.store

    def dense_index(self) -> DenseIndex:
        """The dense index, following every newly committed generation."""
        return CurrentDenseIndex(lambda: self.indexes, owner=self.name)

    def keyword_index(self) -> KeywordIndex:
        """The BM25 index, following every newly committed generation."""
        return CurrentKeywordIndex(lambda: self.indexes, owner=self.name)

    def graph_index(self) -> GraphIndex | None:
        """The graph index (`ctxrag.stores.graph.GraphIndex`) of the current generation, None when graph RAG is off."""
        return self.indexes.get("graph")

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

    # -- search -----------------------------------------------------------------------
    def search(self, query: str, k: int = 10, *, mode: SearchMode = "dense", filter: Any = None) -> list[Document]:
        """Top-k chunks for `query`, with ``score`` (and the mode's own score key) in metadata."""
        return self.as_retriever(mode=mode, k=k, filter=filter).invoke(query)

    def as_retriever(self, mode: str = "hybrid", k: int = 10, **kwargs: Any) -> Any:
        """A LangChain retriever over this knowledge base; see `ctxrag.retrievers.factory.make_retriever`."""
        from ctxrag.retrievers.factory import make_retriever

        return make_retriever(self, mode=mode, k=k, **kwargs)

    # -- LangChain VectorStore face (ctxrag.vectorstore) ---------------------------------------------------------
    def as_vectorstore(self) -> Any:
        """This knowledge base as a LangChain `VectorStore` (`ctxrag.vectorstore.KnowledgeBaseVectorStore`)."""
        from ctxrag.vectorstore import KnowledgeBaseVectorStore

        return KnowledgeBaseVectorStore(self)

    def upsert_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]]) -> None:
        """Store documents that come already chunked (no splitting, no context), replacing any with the same doc id,
        in one write session and one index generation."""
        if not documents:
            return
        indexed = [self._to_indexed(r) for _, records in documents for r in records]
        for c, v in zip(indexed, embed_array(self.embeddings, [c.text for c in indexed])):  # outside the lock
            c.vector = v
        with self._write_session() as session:
            old = [c.chunk_id for doc, _ in documents for c in session.store.chunks_of(doc.doc_id)]
            for index in session.indexes.values():
                if old:
                    index.delete(old)
                index.add(indexed)
            for doc, records in documents:
                session.store.upsert_document(doc, records)
            self._commit()

    def delete_documents(self, doc_ids: list[str]) -> list[str]:
        """Delete documents by id from the store and every index in one commit; unknown ids are ignored.
        Returns the ids that were deleted."""
        with self._write_session() as session:
            deleted = [d for d in doc_ids if session.store.get_document(d) is not None]
            if not deleted:
                return []
            chunk_ids = [c for d in deleted for c in session.store.delete_document(d)]
            for index in session.indexes.values():
                index.delete(chunk_ids)
            self._commit()
        return deleted
