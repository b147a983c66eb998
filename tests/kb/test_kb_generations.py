"""Knowledge base writers and readers in one process: no lost update between two objects on one knowledge base,
long-lived readers switch to newer generations, readers never delete, a document missing from an index is
re-indexed. Real FAISS, BM25 and SQLite; the deterministic `fake` embeddings (identical text -> identical vector).
Local-only by design (Milvus has no generations); what a reader and threaded writers see through the facade runs on
both backends in tests/kb/test_conformance.py."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", embeddings=EmbeddingSettings(provider="fake"))


def _doc(folder: Path, name: str, word: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    path.write_text(f"# {name}\n\nThe marker word of {name} is {word}.\n", encoding="utf-8")
    return path


def _bm25_top(kb: KnowledgeBase, word: str) -> str | None:
    hits = kb.search(word, k=1, mode="bm25")  # BM25 fills to k with non-matching chunks: only a match counts
    return Path(hits[0].metadata["source"]).stem if hits and word in hits[0].page_content.lower() else None


def test_two_writers_on_stale_objects_lose_nothing(settings: Settings, tmp_path: Path) -> None:
    a = KnowledgeBase.open("kb", settings)
    b = KnowledgeBase.open("kb", settings)
    assert len(a.indexes["bm25"]) == len(b.indexes["bm25"]) == 0  # both loaded generation 0
    a.ingest([_doc(tmp_path / "a", "alpha", "quokkaflux")], progress=False)
    b.ingest([_doc(tmp_path / "b", "beta", "zirconwhisk")], progress=False)  # b's indexes were stale: reloaded first
    a.delete_document("alpha.md")
    b.ingest([_doc(tmp_path / "c", "gamma", "velvetorbit")], progress=False)
    fresh = KnowledgeBase.open("kb", settings)
    st = fresh.stats()
    assert st["documents"] == 2 and st["indexes"] == {"dense": 2, "bm25": 2} and st["generation"] == 4
    assert _bm25_top(fresh, "zirconwhisk") == "beta" and _bm25_top(fresh, "velvetorbit") == "gamma"
    assert _bm25_top(fresh, "quokkaflux") is None
    for kb in (a, b, fresh):
        kb.close()


def test_long_lived_reader_sees_new_updated_and_deleted_documents(settings: Settings, tmp_path: Path) -> None:
    writer = KnowledgeBase.open("kb", settings)
    reader = KnowledgeBase.open("kb", settings)
    assert reader.search("anything", k=1) == []
    doc = _doc(tmp_path / "d", "delta", "marmotspline")
    writer.ingest([doc], progress=False)
    assert _bm25_top(reader, "marmotspline") == "delta"  # no reopen
    new_text = "# delta\n\nThe marker word of delta is now heliumtango.\n"
    doc.write_text(new_text, encoding="utf-8")
    writer.ingest([doc], progress=False)
    indexed_text = next(writer.store.iter_chunks()).indexed_text
    hits = reader.search(indexed_text, k=1, mode="dense")
    # the fake embedding of the new text equals its indexed vector: cosine 1 only if the NEW vector is searched
    assert hits and hits[0].page_content.endswith("heliumtango.") and hits[0].metadata["cosine"] == pytest.approx(1.0)
    assert _bm25_top(reader, "marmotspline") is None and _bm25_top(reader, "heliumtango") == "delta"
    writer.delete_document("delta.md")
    assert reader.search("heliumtango", k=3, mode="bm25") == []
    assert reader.stats()["indexes"] == {"dense": 0, "bm25": 0}
    writer.close()
    reader.close()


def test_readers_never_delete_generations(settings: Settings, tmp_path: Path) -> None:
    kb = KnowledgeBase.open("kb", settings)
    for i, word in enumerate(["ottermint", "pylonfrost", "quasarbean"]):
        kb.ingest([_doc(tmp_path / f"f{i}", f"doc{i}", word)], progress=False)
    base = kb.root / "indexes"
    assert sorted(p.name for p in base.glob("gen-*")) == ["gen-000002", "gen-000003"]  # current and the one before
    (base / "gen-000009").mkdir()  # an uncommitted generation of a crashed writer
    (base / ".tmp-gen-000004-1-x").mkdir()
    before = sorted(p.name for p in base.iterdir())
    for _ in range(3):
        r = KnowledgeBase.open("kb", settings)
        assert _bm25_top(r, "pylonfrost") == "doc1"
        r.close()
    assert sorted(p.name for p in base.iterdir()) == before  # opening and searching removed nothing
    kb.ingest([_doc(tmp_path / "f9", "doc9", "rivetsolace")], progress=False)  # a writer cleans up, under the lock
    assert sorted(p.name for p in base.glob("gen-*")) == ["gen-000003", "gen-000004"]
    kb.close()


def test_document_stored_but_missing_from_an_index_is_reindexed(settings: Settings, tmp_path: Path) -> None:
    kb = KnowledgeBase.open("kb", settings)
    folder = tmp_path / "docs"
    _doc(folder, "one", "lanternquill")
    _doc(folder, "two", "mosaicdrift")
    kb.ingest([folder], progress=False)
    lost = [c.chunk_id for c in kb.store.chunks_of(kb.get_document("two.md").doc_id)]
    with kb.snapshots.session() as session:  # simulate the old lost-update bug: bm25 lacks a stored document
        session.indexes["bm25"].delete(lost)
        kb.snapshots.commit(session)
    assert kb.stats()["indexes"] == {"dense": 2, "bm25": 1}
    report = kb.ingest([folder], progress=False)
    by_name = {Path(f.path).name: f for f in report.files}
    assert by_name["one.md"].status == "skipped"
    assert by_name["two.md"].status == "updated" and "missing from index bm25" in by_name["two.md"].reason
    assert kb.stats()["indexes"] == {"dense": 2, "bm25": 2} and _bm25_top(kb, "mosaicdrift") == "two"
    kb.close()


def test_concurrent_searches_while_adding_texts_in_one_process(settings: Settings) -> None:
    """The server's case: adds and searches on one object from many threads; published indexes never change
    under a search."""
    kb = KnowledgeBase.open("kb", settings)
    kb.add_texts([{"text": "seed text about harbors", "source": "mem://seed"}])
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            kb.add_texts([{"text": f"note {i} about topic{chr(97 + i % 26)}word", "source": f"mem://n{i}"}])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def search() -> None:
        try:
            for _ in range(20):
                kb.search("note about topic", k=5, mode="hybrid")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(15)] + [threading.Thread(target=search) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert kb.stats()["documents"] == 16 and kb.stats()["indexes"] == {"dense": 16, "bm25": 16}
    kb.close()
