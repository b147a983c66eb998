"""``ctxrag kb check`` and ``ctxrag kb repair``: compare a knowledge base's document store with every index by chunk
id, and rebuild what is missing or damaged from the stored chunk texts (vectors from the embedding cache where
present), committed as a new generation.

Maintenance sees a local knowledge base only through `MaintenanceTarget` (declared methods of `KnowledgeBase`), and
repairs through a write session (`WriteSession.reindex`, the index write that ``replace`` and ``delete`` go through
too). ``kb.check()`` and ``kb.repair()`` (`KnowledgeBaseProtocol`) call these on a local knowledge base; a
Milvus-resident one checks and repairs its own two collections.

Example::

    from ctxrag import KnowledgeBase
    kb = KnowledgeBase.open("demo", create=False)
    report = kb.check()                  # ctxrag.kb.maintenance.check(kb) on a local knowledge base
    if not report.clean:
        print("\\n".join(kb.repair().lines()))
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, cast

from ctxrag.errors import IndexCorruptError
from ctxrag.settings import Settings
from ctxrag.stores.vectors.backends import open_unreconciled
from ctxrag.stores.base import ChunkIndex, IndexedChunk
from ctxrag.stores.consistency import CheckReport, IndexDifference, RepairReport, compare_ids
from ctxrag.stores.documents.docstore import ChunkRecord
from ctxrag.stores.embedding import EmbedFn, embed_chunks
from ctxrag.stores.engine.external import SelfPersistingIndex, reconcile
from ctxrag.stores.registry import IndexSetup
from ctxrag.stores.engine.segment_checksums import full_verification
from ctxrag.stores.engine.snapshots import WriteSession

_PATCHED = {"graph"}
"""Indexes repaired in place rather than rebuilt (rebuilding the graph would extract every chunk's triplets again)."""


class MaintenanceTarget(Protocol):
    """What check and repair use of a local knowledge base (`KnowledgeBase` declares each)."""

    name: str
    settings: Settings
    root: Path

    @property
    def generation(self) -> int:
        """The committed index generation."""

    def stored_chunk_ids(self) -> set[str]:
        """Every chunk id in the document store."""

    def index_kinds(self) -> dict[str, Callable[[], ChunkIndex]]:
        """Index name -> make an empty index of that kind."""

    def saved_index(self, generation: int, name: str) -> ChunkIndex | None:
        """Index `name` as saved in `generation`; None when not saved there, `IndexCorruptError` when damaged."""

    def index_setup(self) -> IndexSetup:
        """What opening the indexes needs (the embed function)."""

    def repair_session(self) -> AbstractContextManager[WriteSession]:
        """A write session under the write lock, no index loaded."""

    def commit(self, session: WriteSession) -> None:
        """Commit the session as the next generation."""


def check(kb: MaintenanceTarget) -> CheckReport:
    """Each index of the current generation (and the live Chroma/Milvus store, unreconciled) against the document
    store; an index that cannot be loaded is reported with its error."""
    gen = kb.generation
    store_ids = kb.stored_chunk_ids()
    report = CheckReport(kb.name, gen, len(store_ids))
    for name, make in kb.index_kinds().items():
        index: ChunkIndex | None = None
        raw = open_unreconciled(kb.settings, kb.name, kb.root) if name == "dense" else None
        try:
            if raw is not None:
                index = raw  # type: ignore[assignment]
            elif not gen:
                index = make()
            else:
                with full_verification():  # every file hashed, whatever the verified markers say
                    index = kb.saved_index(gen, name)
            if index is None:
                raise IndexCorruptError(f"index {name!r} is not saved in generation {gen} (rebuilt in memory on "
                                        f"every open); run `ctxrag kb repair {kb.name}`")
            ids = set(index.chunk_ids())
            report.counts[name] = len(ids)
            report.differences.append(compare_ids(name, store_ids, ids))
        except IndexCorruptError as e:
            report.counts[name] = None
            report.differences.append(IndexDifference(name, error=str(e)))
        finally:
            if raw is not None:
                raw.close()
    return report


def repair(kb: MaintenanceTarget) -> RepairReport:
    """Under the write lock: load each index of the current generation; rebuild one that is missing or damaged
    from the stored chunks, remove chunks the store lacks and add the ones it misses; commit a new generation if
    anything changed. A damaged ``kb.sqlite`` cannot be repaired from the indexes (`StoreCorruptError`)."""
    report = RepairReport(kb.name)
    with kb.repair_session() as session:
        gen = session.generation
        records = {r.chunk_id: r for r in session.store.iter_chunks_in_write_order()}
        embed = kb.index_setup().embed
        changed = False
        for name, make in kb.index_kinds().items():
            raw = open_unreconciled(kb.settings, kb.name, kb.root) if name == "dense" else None
            if raw is not None:  # Chroma / Milvus: bring the live store in step with the document store
                fixed = reconcile(raw, session.store.iter_chunks(), embed, kb_name=kb.name)
                report.actions[name] = (f"reconciled: removed {len(fixed.removed)} chunks not stored, re-added "
                                        f"{len(fixed.added)}" if fixed.changed else "ok")
                session.reindex(name, cast(ChunkIndex, raw))  # a Chroma / Milvus index is one
                continue
            index = None
            why = "not saved in the current generation"
            try:
                with full_verification():
                    index = kb.saved_index(gen, name)
            except IndexCorruptError as e:
                why = str(e)
            if index is None:
                index = make()
                todo = set(records) - set(index.chunk_ids())
                session.reindex(name, index, add=_chunks(name, [r for c, r in records.items() if c in todo], embed))
                report.actions[name] = f"rebuilt from {len(records)} stored chunks ({why})" if gen else "ok"
                changed = changed or bool(gen)
                continue
            have = set(index.chunk_ids())
            extra, missing = sorted(have - set(records)), sorted(set(records) - have)
            if not (extra or missing):
                session.reindex(name, index)
                report.actions[name] = "ok"
            elif name in _PATCHED or isinstance(index, SelfPersistingIndex):
                session.reindex(name, index, remove=extra,
                                add=_chunks(name, [r for c, r in records.items() if c in set(missing)], embed))
                report.actions[name] = f"removed {len(extra)} chunks not stored, added {len(missing)} missing"
            else:  # rebuilt whole, in write order: the same scores and tie order as before the damage
                session.reindex(name, make(), add=_chunks(name, list(records.values()), embed))
                report.actions[name] = (f"rebuilt from {len(records)} stored chunks ({len(missing)} were "
                                        f"missing, {len(extra)} not stored)")
            changed = changed or bool(extra or missing)
        if changed:  # committed like any write session: next generation, SQLite, published, cleaned up
            kb.commit(session)
            report.generation = session.generation
        else:
            for index in session.indexes.values():
                if isinstance(index, SelfPersistingIndex):
                    index.close()  # opened for the repair only; the knowledge base keeps its own
    return report


def _chunks(name: str, records: list[ChunkRecord], embed: EmbedFn) -> list[IndexedChunk]:
    """Stored chunks as an index takes them; dense vectors come from the embedding cache for known texts."""
    return embed_chunks(records, embed if name == "dense" else None) if records else []
