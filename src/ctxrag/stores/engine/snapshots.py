"""Which index generation a knowledge base object searches, and write sessions that commit the next one.

* Readers: `IndexSnapshots.current` returns the indexes of the newest committed generation. Each call runs one
  ``PRAGMA data_version`` (microseconds); when another connection committed and the generation moved, it loads the
  new one (checksums verified) and switches to it. While one thread loads, the others keep answering from the
  previous snapshot; one whose search finds that snapshot damaged waits for the load and retries on the new one
  (`newer_than`: a generation ``kb repair`` just committed). A published snapshot is never mutated (only self-persisting stores, Chroma and Milvus, are
  shared live objects), so a search never sees a half-applied change. A reader leases the generation before it
  reads it and keeps the lease while its index objects live (`ctxrag.stores.engine.leases`), so clean-up never deletes a
  file it may still open.
* Writers: `IndexSnapshots.session` takes the inter-process write lock, opens its own SQLite connection, loads the
  generation current *now* into private index objects and begins a transaction; `commit` writes them as the next
  generation, commits SQLite, publishes them and cleans up. A failure rolls SQLite back and publishes nothing.

Example::

    snapshots = IndexSnapshots(generations, store, factories=lambda: {...}, embed=...)
    snapshots.current()["bm25"].search("query", k=5)
    with snapshots.session() as s:
        s.replace([(doc, records)], chunks)     # or s.delete([doc_id]): the store and every index together
        snapshots.commit(s)
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ctxrag.errors import IndexCorruptError, KnowledgeBaseDeleted, disk_full, is_disk_full
from ctxrag.stores.base import ChunkIndex, IndexedChunk
from ctxrag.stores.documents.docstore import ChunkRecord, DocStore, DocumentRecord
from ctxrag.stores.embedding import EmbedFn, embed_chunks
from ctxrag.stores.engine.external import SelfPersistingIndex, reconcile
from ctxrag.stores.engine.generations import GenerationStore
from ctxrag.stores.engine.leases import Lease
from ctxrag.stores.engine.segments import SegmentedIndex

log = logging.getLogger(__name__)

IndexFactories = Mapping[str, tuple[Callable[[], ChunkIndex], Callable[[Path], "ChunkIndex | None"]]]
"""Index name -> (make an empty one, load one from a generation folder; None means "rebuild from the store")."""
LOAD_ATTEMPTS = 5
"""How often a reader retries when the generation it is loading was replaced and cleaned up meanwhile."""


class Snapshot(NamedTuple):
    """The indexes of one committed generation, as searches see them."""

    generation: int
    indexes: dict[str, ChunkIndex]
    store: tuple[int, int] = (0, 0)
    """Identity (device, inode) of the document store file the generation was read from."""


@dataclass
class WriteSession:
    """One write under the inter-process lock: its own SQLite connection (in a transaction) and private indexes
    loaded from the generation that was current when the lock was taken."""

    store: DocStore
    generation: int
    indexes: dict[str, ChunkIndex]

    def replace(self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]],
                chunks: list[IndexedChunk]) -> list[str]:
        """Write `documents` (each with its chunk records) in the store, and `chunks` (their chunks as indexed) in
        every index, in place of what those documents had; returns the chunk ids they had before."""
        old = [c.chunk_id for doc, _ in documents for c in self.store.chunks_of(doc.doc_id)]
        self._write(self.indexes, remove=old, add=chunks)
        for doc, records in documents:
            self.store.upsert_document(doc, records)
        return old

    def delete(self, doc_ids: Sequence[str]) -> list[str]:
        """Remove documents from the store and their chunks from every index; returns the chunk ids removed
        (unknown ids remove nothing)."""
        chunk_ids = [c for d in doc_ids for c in self.store.delete_document(d)]
        self._write(self.indexes, remove=chunk_ids, add=[])
        return chunk_ids

    def reindex(self, name: str, index: ChunkIndex, *, remove: Sequence[str] = (),
                add: list[IndexedChunk] | None = None) -> None:
        """Repair: make `index` this session's index `name` and bring it in step with the store, which is not
        changed (remove chunk ids the store lacks, add stored chunks it misses)."""
        self.indexes[name] = index
        self._write({name: index}, remove=list(remove), add=add or [])

    @staticmethod
    def _write(indexes: Mapping[str, ChunkIndex], *, remove: list[str], add: list[IndexedChunk]) -> None:
        """The one index write every verb goes through: removals first, so a replaced chunk id is added fresh."""
        for index in indexes.values():
            if remove:
                index.delete(remove)
            if add:
                index.add(add)


def missing_from(indexes: Mapping[str, ChunkIndex], chunk_ids: list[str]) -> list[str]:
    """Names of the indexes lacking any of `chunk_ids` (self-persisting stores are reconciled when opened)."""
    out = []
    for name, index in indexes.items():
        contains = getattr(index, "__contains__", None)
        if contains is not None and not isinstance(index, SelfPersistingIndex) and not all(contains(c) for c in chunk_ids):
            out.append(name)
    return out


class IndexSnapshots:
    """The published index snapshot of one knowledge base object, and its write sessions (see the module docstring).

    `factories` lists the index kinds; `embed(texts)` gives passage vectors for rebuilding a dense index (for a kind
    the generation lacks) and for bringing a self-persisting store back in step after a failed write."""

    def __init__(
        self, generations: GenerationStore, store: DocStore, *, factories: Callable[[], IndexFactories],
        embed: EmbedFn, writer_lock: threading.RLock | None = None,
    ) -> None:
        self.generations = generations
        self.store = store
        self._factories = factories
        self._embed = embed
        self._refresh_lock = threading.Lock()
        self._writer_lock = writer_lock or threading.RLock()
        self.snapshot: Snapshot | None = None
        self._data_version = -1

    @property
    def kb_name(self) -> str:
        return self.generations.kb_name

    def committed_generation(self, store: DocStore | None = None) -> int:
        return int((store or self.store).get_meta("generation") or 0)

    # -- readers ------------------------------------------------------------------------
    def current(self) -> dict[str, ChunkIndex]:
        """The indexes of the newest committed generation (loaded on first use)."""
        self.refresh()
        assert self.snapshot is not None
        return self.snapshot.indexes

    def refresh(self, *, wait: bool = False) -> bool:
        """Switch to a newer committed generation if there is one; True when it did. `KnowledgeBaseDeleted` when
        the knowledge base was deleted meanwhile; one deleted and created again is followed (`DocStore.follow`).
        While another thread loads, this returns at once (the caller reads the previous snapshot) unless `wait`."""
        self.store.follow()
        if (self.snapshot is not None and self.snapshot.store == self.store.identity
                and self.store.data_version() == self._data_version):
            return False
        first = self.snapshot is None
        if not self._refresh_lock.acquire(blocking=first or wait):
            return False  # another thread is loading: keep answering from the current snapshot
        try:
            version = self.store.data_version()
            same_store = self.snapshot is not None and self.snapshot.store == self.store.identity
            if same_store and version == self._data_version:
                return False
            changed = not same_store or self.committed_generation() != self.snapshot.generation
            if changed:
                self.snapshot = self._load_current(reuse=same_store)
            self._data_version = version
            return changed
        finally:
            self._refresh_lock.release()

    def newer_than(self, seen: Mapping[str, ChunkIndex]) -> dict[str, ChunkIndex] | None:
        """After a search on `seen` (a snapshot's indexes) raised `IndexCorruptError`: the indexes of a newer
        generation to search instead, or None when `seen` is still the newest (the damage stands). Waits for a load
        another thread has in progress: right after ``kb repair`` commits, the thread that found the change loads
        the repaired generation while the others would read the damaged one (a hybrid search's two branches run on
        two threads, so this was a request's own other branch)."""
        self.refresh(wait=True)
        snapshot = self.snapshot
        if snapshot is None or snapshot.indexes is seen:
            return None
        return snapshot.indexes

    def publish(self, snapshot: Snapshot) -> None:
        with self._refresh_lock:
            self.snapshot = snapshot
            self._data_version = self.store.data_version()

    def _load_current(self, reuse: bool = True) -> Snapshot:
        live = self.snapshot.indexes if self.snapshot is not None and reuse else None
        for _attempt in range(LOAD_ATTEMPTS):
            gen = self.committed_generation()
            identity = self.store.identity
            lease = None
            try:
                lease = self.generations.lease(gen) if gen else None
                if gen and lease is None and self.committed_generation() != gen:
                    continue  # retired by a writer's clean-up since: read the newer one
                indexes = self.load_generation(gen, self.store, live)
                self._hold(lease, indexes)
                return Snapshot(gen, indexes, identity)
            except (IndexCorruptError, OSError):
                if lease is not None:
                    lease.release()
                if self.store.follow() or identity != self.store.identity:  # deleted (raises) or replaced meanwhile
                    live = None
                    continue
                if self.committed_generation() == gen:
                    raise
                log.info("knowledge base %r: generation %d was replaced while loading; loading the newer one",
                         self.kb_name, gen)
        raise IndexCorruptError(f"{self.generations.base}: generations of knowledge base {self.kb_name!r} kept "
                                f"changing while loading ({LOAD_ATTEMPTS} attempts)")

    @staticmethod
    def _hold(lease: Lease | None, indexes: Mapping[str, ChunkIndex]) -> None:
        """Keep `lease` while any index object read from its generation lives (a search may still open one of its
        files); live stores (Chroma, Milvus) are shared across generations and hold nothing."""
        if lease is not None:
            lease.bind(i for i in indexes.values() if not isinstance(i, SelfPersistingIndex))

    def load_generation(
        self, gen: int, store: DocStore, reuse: Mapping[str, ChunkIndex] | None = None
    ) -> dict[str, ChunkIndex]:
        """Every index of generation `gen`, checksums verified; a kind the generation lacks is rebuilt from `store`
        (with a warning: ``kb repair`` or the next write saves it)."""
        manifest = self.generations.manifest(gen) if gen else None
        out: dict[str, ChunkIndex] = {}
        for name, (make, load) in self._factories().items():
            if reuse and name in reuse and isinstance(reuse[name], SelfPersistingIndex):
                out[name] = reuse[name]  # a live store (Chroma, Milvus): already current
                continue
            present = bool(gen) and self.generations.verify(gen, name, manifest)
            prior = reuse.get(name) if reuse else None
            loaded = None
            if present and isinstance(prior, SegmentedIndex):  # load only the segments `prior` does not have
                loaded = prior.reopen(self.generations.gen_dir(gen) / name)
            if present and loaded is None:
                loaded = load(self.generations.gen_dir(gen) / name)
            if loaded is None:
                loaded = make()
                if gen:
                    log.warning("knowledge base %r: index %r is not in %s; rebuilt in memory from the document store "
                                "(`ctxrag kb repair %s` saves it)", self.kb_name, name, self.generations.gen_dir(gen),
                                self.kb_name)
                    self._rebuild(loaded, name, store)
            out[name] = loaded
        return out

    def saved_index(self, gen: int, name: str) -> ChunkIndex | None:
        """Index `name` as saved in generation `gen`, its files checked against the manifest; None when the generation
        does not hold it (generation 0, a kind enabled since, or a loader that rebuilds). `IndexCorruptError` when the
        generation, its manifest or the index's files are damaged (for ``kb check`` / ``kb repair``)."""
        _make, load = self._factories()[name]
        lease = None if not gen or self.generations.is_locked_here else self.generations.lease(gen)
        try:
            if not gen or not self.generations.verify(gen, name, self.generations.manifest(gen)):
                index = None
            else:
                index = load(self.generations.gen_dir(gen) / name)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        self._hold(lease, {name: index} if index is not None else {})
        return index

    def _rebuild(self, index: ChunkIndex, name: str, store: DocStore) -> None:
        """Fill an empty index from the stored chunks, in write order (the tie order the ingests gave it)."""
        if isinstance(index, SelfPersistingIndex):
            return  # opened reconciled with the store
        index.add(embed_chunks(store.iter_chunks_in_write_order(), self._embed if name == "dense" else None))

    def factories(self) -> IndexFactories:
        """The index kinds (see `ctxrag.stores.registry`)."""
        return self._factories()

    def reconcile(self, index: SelfPersistingIndex) -> None:
        """Bring a self-persisting store back in step with the committed chunks after a failed write."""
        try:
            reconcile(index, self.store.iter_chunks(), self._embed, kb_name=self.kb_name)
        except Exception as e:  # noqa: BLE001 - the write's own error matters more; the next open reconciles
            log.warning("knowledge base %r: reconciling %s after a failed write failed: %s",
                        self.kb_name, type(index).__name__, e)

    def close(self) -> None:
        if self.snapshot is not None:
            for index in self.snapshot.indexes.values():
                close = getattr(index, "close", None)  # Chroma / Milvus clients
                if close is not None:
                    close()

    # -- writers ------------------------------------------------------------------------
    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """The writer thread lock of this object, then the inter-process write lock (`GenerationStore.write_lock`)."""
        with self._writer_lock, self.generations.write_lock():
            yield

    @contextmanager
    def session(self, *, repair: bool = False) -> Iterator[WriteSession]:
        """Hold the write lock with private indexes of the current generation (see the module docstring).

        With `repair`, no index is loaded (the repair brings each one, `WriteSession.reindex`) and the document store
        file is checked again (a damaged one cannot be repaired from the indexes: `StoreCorruptError`)."""
        with self.write_lock():
            try:
                store = DocStore(self.store.path, check=repair, create=False)
            except KnowledgeBaseDeleted:  # by `kb delete` since this object opened it: never create a partial one
                self.generations.remove_lock_leftovers()
                raise
            if store.identity != self.store.identity:
                store.close()
                raise KnowledgeBaseDeleted(self.kb_name, "and created again by another process since this one opened "
                                                         "it; nothing was written (open it again to write to the new one)")
            session: WriteSession | None = None
            try:
                gen = self.committed_generation(store)
                if self.snapshot is not None and gen != self.snapshot.generation:
                    log.info("knowledge base %r: generation moved from %d to %d since it was loaded; applying the "
                             "change on top of %d", self.kb_name, self.snapshot.generation, gen, gen)
                reuse = self.snapshot.indexes if self.snapshot is not None else None
                session = WriteSession(store, gen, {} if repair else self.load_generation(gen, store, reuse))
                store.begin()
                yield session
                store.rollback()  # nothing is left uncommitted on purpose
            except BaseException as e:
                store.rollback()
                if session is not None:
                    for index in session.indexes.values():
                        if isinstance(index, SelfPersistingIndex):
                            self.reconcile(index)
                if is_disk_full(e, self.store.path):  # the new generation is never pointed at: the last committed one stands
                    raise disk_full(self.store.path.parent, e, "this write was rolled back.") from e
                raise
            finally:
                store.close()

    def optimize(self) -> dict[str, tuple[int, int]]:
        """Merge every segmented index (FAISS, BM25) into one segment without its tombstones, committed as the next
        generation (``ctxrag kb optimize``). Readers keep answering from the current generation meanwhile; other
        writers wait for the lock. Returns index name -> (segments before, segments after)."""
        out: dict[str, tuple[int, int]] = {}
        with self.session() as session:
            segmented = {n: i for n, i in session.indexes.items() if isinstance(i, SegmentedIndex)}
            for name, index in segmented.items():
                out[name] = (len(index.sealed), 0)
                index.merge_all()
            self.commit(session)
            for name, index in segmented.items():
                out[name] = (out[name][0], len(index.sealed))
        return out

    def commit(self, session: WriteSession) -> None:
        """Write the session's indexes as the next generation (temp folder, fsync, rename), commit SQLite pointing
        at it, publish them to this object's readers and clean up old generations."""
        new = session.generation + 1
        self.generations.write(new, session.indexes)
        session.store.set_meta("generation", str(new))
        session.store.commit()
        session.generation = new
        self._hold(self.generations.lease(new), session.indexes)  # under the write lock: `new` is current
        self.publish(Snapshot(new, session.indexes, session.store.identity))
        self.generations.clean(new)
