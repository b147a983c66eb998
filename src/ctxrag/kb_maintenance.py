"""``ctxrag kb check`` and ``ctxrag kb repair``: compare a knowledge base's document store with every index by chunk
id, and rebuild what is missing or damaged from the stored chunk texts (vectors from the embedding cache where
present), committed as a new generation.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.kb_maintenance import check, repair
    kb = KnowledgeBase.open("demo", create=False)
    report = check(kb)
    if not report.clean:
        print("\n".join(repair(kb).lines()))
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ctxrag.errors import IndexCorruptError
from ctxrag.stores.backends import open_unreconciled
from ctxrag.stores.base import ChunkIndex
from ctxrag.stores.consistency import CheckReport, IndexDifference, RepairReport, compare_ids
from ctxrag.stores.docstore import ChunkRecord, DocStore
from ctxrag.stores.embedding import EmbedFn, embed_chunks
from ctxrag.stores.external import SelfPersistingIndex, reconcile
from ctxrag.stores.snapshots import WriteSession

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.knowledge_base import KnowledgeBase

_PATCHED = {"graph"}
"""Indexes repaired in place rather than rebuilt (rebuilding the graph would extract every chunk's triplets again)."""


def _stored_ids(store: DocStore) -> set[str]:
    return {r[0] for r in store.conn.execute("SELECT chunk_id FROM chunks")}


def check(kb: "KnowledgeBase") -> CheckReport:
    """Each index of the current generation (and the live Chroma/Milvus store, unreconciled) against the document
    store; an index that cannot be loaded is reported with its error."""
    if kb.settings.store == "milvus":  # a Milvus-resident knowledge base checks its own two collections
        return kb.check()  # type: ignore[attr-defined]
    gen = kb.generation
    store_ids = _stored_ids(kb.store)
    report = CheckReport(kb.name, gen, len(store_ids))
    manifest_error = None
    manifest = None
    try:
        manifest = kb.generations.manifest(gen) if gen else None
    except IndexCorruptError as e:
        manifest_error = str(e)
    for name, (make, load) in kb.snapshots.factories().items():
        index: ChunkIndex | None = None
        raw = open_unreconciled(kb.settings, kb.name, kb.root) if name == "dense" else None
        try:
            if raw is not None:
                index = raw  # type: ignore[assignment]
            elif manifest_error:
                raise IndexCorruptError(manifest_error)
            elif not gen:
                index = make()
            elif kb.generations.verify(gen, name, manifest):
                index = load(kb.generations.gen_dir(gen) / name)
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


def repair(kb: "KnowledgeBase") -> RepairReport:
    """Under the write lock: load each index of the current generation; rebuild one that is missing or damaged
    from the stored chunks, remove chunks the store lacks and add the ones it misses; commit a new generation if
    anything changed. A damaged ``kb.sqlite`` cannot be repaired from the indexes (`StoreCorruptError`)."""
    if kb.settings.store == "milvus":
        return kb.repair()  # type: ignore[attr-defined]
    report = RepairReport(kb.name)
    with kb.snapshots.write_lock():
        store = DocStore(kb.root / "kb.sqlite")
        try:
            gen = int(store.get_meta("generation") or 0)
            records = {r.chunk_id: r for r in store.iter_chunks_in_write_order()}
            embed = kb.index_setup().embed
            bad_manifest = None
            manifest = None
            try:
                manifest = kb.generations.manifest(gen) if gen else None
            except IndexCorruptError as e:
                bad_manifest = str(e)
            changed = False
            indexes: dict[str, ChunkIndex] = {}
            for name, (make, load) in kb.snapshots.factories().items():
                raw = open_unreconciled(kb.settings, kb.name, kb.root) if name == "dense" else None
                if raw is not None:  # Chroma / Milvus: bring the live store in step with the document store
                    fixed = reconcile(raw, store.iter_chunks(), kb.index_setup().embed, kb_name=kb.name)
                    report.actions[name] = (f"reconciled: removed {len(fixed.removed)} chunks not stored, re-added "
                                            f"{len(fixed.added)}" if fixed.changed else "ok")
                    indexes[name] = raw
                    continue
                index = None
                why = "not saved in the current generation"
                try:
                    if bad_manifest:
                        why = bad_manifest
                    elif gen and kb.generations.verify(gen, name, manifest):
                        index = load(kb.generations.gen_dir(gen) / name)
                except IndexCorruptError as e:
                    why = str(e)
                if index is None:
                    index = make()
                    todo = set(records) - set(index.chunk_ids())
                    _add(index, name, [r for c, r in records.items() if c in todo], embed)
                    report.actions[name] = f"rebuilt from {len(records)} stored chunks ({why})" if gen else "ok"
                    changed = changed or bool(gen)
                else:
                    have = set(index.chunk_ids())
                    extra, missing = sorted(have - set(records)), sorted(set(records) - have)
                    if not (extra or missing):
                        report.actions[name] = "ok"
                    elif name in _PATCHED or isinstance(index, SelfPersistingIndex):
                        index.delete(extra)
                        _add(index, name, [r for c, r in records.items() if c in set(missing)], embed)
                        report.actions[name] = f"removed {len(extra)} chunks not stored, added {len(missing)} missing"
                    else:  # rebuilt whole, in write order: the same scores and tie order as before the damage
                        index = make()
                        _add(index, name, list(records.values()), embed)
                        report.actions[name] = (f"rebuilt from {len(records)} stored chunks ({len(missing)} were "
                                                f"missing, {len(extra)} not stored)")
                    changed = changed or bool(extra or missing)
                indexes[name] = index
            if changed:  # committed like any write session: next generation, SQLite, published, cleaned up
                session = WriteSession(store, gen, indexes)
                store.begin()
                kb.snapshots.commit(session)
                report.generation = session.generation
            else:
                for index in indexes.values():
                    if isinstance(index, SelfPersistingIndex):
                        index.close()  # opened for the repair only; the knowledge base keeps its own
        finally:
            store.rollback()
            store.close()
    return report


def _add(index: ChunkIndex, name: str, records: list[ChunkRecord], embed: EmbedFn) -> None:
    if records:  # dense vectors: the embedding cache answers known texts
        index.add(embed_chunks(records, embed if name == "dense" else None))
