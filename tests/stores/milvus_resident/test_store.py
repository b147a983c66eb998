"""`MilvusResidentStore` on a real milvus-lite (file): Milvus's full-text BM25 with each analysis, searches with
filters, the four-step document write and every state `reconcile` heals, and the dense-only store a Milvus 2.3
server gets (the real standalone, ``milvus_server`` marker)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ctxrag.errors import ConfigError
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord

pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (pip install 'ctxrag[milvus]')")

from ctxrag.stores.milvus_resident import collections as cols  # noqa: E402
from ctxrag.stores.milvus_resident.store import MilvusResidentStore  # noqa: E402

from milvus_standalone import HAVE_MILVUS_STANDALONE, SKIP_REASON  # noqa: E402

DIM = 8
TEXTS = {
    "team": "团队版包含 200 GB 存储空间",
    "sso": "企业版支持单点登录",
    "pump": "The Falcon-7 pump moves 40 litres per minute",
    "taiwan": "臺灣的首都是臺北",
}


def _vec(i: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.1
    return v / np.linalg.norm(v)


def _doc(name: str, texts: list[str]) -> tuple[DocumentRecord, list[ChunkRecord], np.ndarray]:
    doc_id = f"d-{name}"
    records = [ChunkRecord(f"{doc_id}:{i}", doc_id, i, t, t, None,
                           {"chunk_id": f"{doc_id}:{i}", "doc_id": doc_id, "kb": "t", "source": f"mem://{name}",
                            "title": name, "chunk_index": i, "start_index": 0, "heading_path": "",
                            "file_type": "text" if name != "pump" else "markdown"})
               for i, t in enumerate(texts)]
    seed = sum(map(ord, name))
    return (DocumentRecord(doc_id, f"mem://{name}", name, f"hash-{'|'.join(texts)}", "\n".join(texts), len(texts), {}),
            records, np.stack([_vec(seed + i) for i in range(len(texts))]))


@pytest.fixture(params=["ctxrag", "milvus"])
def store(tmp_path: Path, request: pytest.FixtureRequest):  # noqa: ANN201
    s = MilvusResidentStore(tmp_path / "kb.db", "t", analysis=request.param)
    s.write_documents([_doc(name, [text]) for name, text in TEXTS.items()])
    yield s
    s.close()


def _top(hits: list[tuple[str, float]]) -> str:
    return hits[0][0].split(":")[0][2:] if hits else ""


def test_empty_store_answers_nothing(tmp_path: Path) -> None:
    s = MilvusResidentStore(tmp_path / "e.db", "e")
    try:
        assert s.count() == (0, 0) and s.bm25_search("x", 3) == [] and s.dense_search(_vec(0), 3) == []
        assert s.get_chunks(["nope"]) == {} and s.get_document("nope") is None and s.delete_document("nope") == []
    finally:
        s.close()


def test_full_text_bm25_finds_the_issue_example_with_each_analysis(store: MilvusResidentStore) -> None:
    assert _top(store.bm25_search("存储空间多大", 2)) == "team"  # the check from issue #33
    assert _top(store.bm25_search("单点登录", 2)) == "sso"
    assert _top(store.bm25_search("Falcon pump", 2)) == "pump"
    assert _top(store.bm25_search("台湾的首都", 2)) == "taiwan"  # Simplified query, Traditional text (OpenCC t2s)
    assert all(s > 0 for _, s in store.bm25_search("pump", 4))


def test_bm25_k_filter_and_fill(store: MilvusResidentStore) -> None:
    assert store.bm25_search("zzzqqq", 3) == []
    filled = store.bm25_search("pump", 3, fill=True)
    assert _top(filled) == "pump" and len(filled) == 3 and [s for _, s in filled[1:]] == [0.0, 0.0]
    assert store.bm25_search("pump", 3, 'source == "mem://sso"') == []
    assert [c for c, _ in store.bm25_search("pump", 3, 'source == "mem://sso"', fill=True)] == ["d-sso:0"]
    assert store.bm25_search("pump", 3, "false") == []
    with pytest.raises(ValueError, match="k must be positive"):
        store.bm25_search("pump", 0)


def test_dense_and_in_milvus_hybrid(store: MilvusResidentStore) -> None:
    v = store.vectors(["d-pump:0"])[0]
    assert store.dense_search(v, 1)[0][0] == "d-pump:0"
    assert store.dense_search(v, 4, 'metadata["file_type"] == "text"')[0][0] != "d-pump:0"
    for ranker in ("rrf", "weighted"):
        assert store.hybrid_search(v, "Falcon pump", 2, ranker=ranker)[0][0] == "d-pump:0"
        assert store.hybrid_search(store.vectors(["d-sso:0"])[0], "存储空间", 1, ranker=ranker)[0][0] in {"d-sso:0", "d-team:0"}
    with pytest.raises(ConfigError, match="'max'"):
        store.hybrid_search(v, "pump", 2, ranker="max")
    with pytest.raises(KeyError, match="nope"):
        store.vectors(["nope"])


def test_replacing_a_document_keeps_only_its_new_chunks(store: MilvusResidentStore) -> None:
    store.write_document(*_doc("team", ["团队版 A", "团队版 B", "团队版 C"]))
    assert [r.content for r in store.chunks_of("d-team")] == ["团队版 A", "团队版 B", "团队版 C"]
    store.write_document(*_doc("team", ["团队版 only"]))
    assert [r.chunk_id for r in store.chunks_of("d-team")] == ["d-team:0"]
    assert store.document_state("d-team") == ("hash-团队版 only", cols.STATUS_OK, 1)
    assert store.get_document("d-team").text == "团队版 only" and store.count() == (4, 4)
    assert store.delete_document("d-team") == ["d-team:0"] and store.count() == (3, 3)


def _crash_after(store: MilvusResidentStore, step: int, doc: tuple) -> None:
    """The steps of `write_documents` a process killed after `step` would have done (1: row, 2: chunks, 3: stale)."""
    d, records, vectors = doc
    wid = cols.write_id(d, records)
    store._put_docs([doc], cols.STATUS_WRITING, {}, time.time())
    if step >= 2:
        rows = [cols.chunk_row(r, v, wid, store.analysis) for r, v in zip(records, vectors)]
        store._client.upsert(store.chunks_name, rows[: len(rows) if step > 2 or len(rows) == 1 else 1])
    if step >= 3:
        store._delete_stale([doc])


@pytest.mark.parametrize("step", [1, 2, 3])
def test_reconcile_heals_a_write_killed_after_each_step(tmp_path: Path, step: int) -> None:
    s = MilvusResidentStore(tmp_path / "r.db", "r")
    try:
        s.write_document(*_doc("a", ["old one", "old two", "old three"]))
        s.write_document(*_doc("b", ["keep me"]))
        _crash_after(s, step, _doc("a", ["new one", "new two"]))
        assert not s.reconcile(grace_s=3600).changed  # a young write may be alive on another node: left alone
        report = s.reconcile(grace_s=0)
        if step == 3:  # every chunk arrived: the write is finished
            assert report.finished == ["d-a"]
            assert [r.content for r in s.chunks_of("d-a")] == ["new one", "new two"]
            assert s.document_state("d-a").status == cols.STATUS_OK
        else:  # half written: the document is dropped, so the next ingest adds it again
            assert report.dropped == ["d-a"] and s.chunks_of("d-a") == [] and s.document_state("d-a") is None
        assert [r.content for r in s.chunks_of("d-b")] == ["keep me"]
        assert not s.reconcile(grace_s=0).changed
    finally:
        s.close()


def test_reconcile_finishes_deletes_and_removes_orphans(tmp_path: Path) -> None:
    s = MilvusResidentStore(tmp_path / "o.db", "o")
    try:
        for name in ("a", "b", "c"):
            s.write_document(*_doc(name, [f"text {name}"]))
        s.update_row(s.doc_rows('doc_id == "d-a"')[0], status=cols.STATUS_DELETING)  # killed after marking it
        s._client.delete(s.docs_name, filter='doc_id == "d-c"')  # a row lost some other way: its chunk is an orphan
        report = s.reconcile(grace_s=0, orphans=True)
        assert report.deleted == ["d-a"] and report.orphans == ["d-c:0"]
        assert s.chunk_ids() == {"d-b:0"} and [r.doc_id for r in s.document_rows()] == ["d-b"]
    finally:
        s.close()


def test_threads_writing_the_same_document_leave_its_chunks(tmp_path: Path) -> None:
    s = MilvusResidentStore(tmp_path / "w.db", "w")
    try:
        docs = [_doc("same", ["one", "two", "three"]) for _ in range(4)]
        threads = [threading.Thread(target=s.write_document, args=d) for d in docs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.content for r in s.chunks_of("d-same")] == ["one", "two", "three"]
    finally:
        s.close()


def test_existing_collections_decide_and_foreign_ones_are_refused(tmp_path: Path) -> None:
    s = MilvusResidentStore(tmp_path / "x.db", "x", analysis="milvus")
    s.write_document(*_doc("a", ["臺灣"]))
    s.close()
    again = MilvusResidentStore(tmp_path / "x.db", "x", analysis="ctxrag")
    try:
        assert again.analysis == "milvus" and again.dim == DIM and _top(again.bm25_search("台湾", 1)) == "a"
        with pytest.raises(ValueError, match="dimension 3"):
            again.write_document(_doc("b", ["x"])[0], _doc("b", ["x"])[1], np.ones((1, 3), np.float32))
    finally:
        again.close()
    none = MilvusResidentStore(tmp_path / "y.db", "y", create=False)
    try:
        assert not none.exists
    finally:
        none.close()


@pytest.mark.milvus_server
@pytest.mark.skipif(not HAVE_MILVUS_STANDALONE, reason=SKIP_REASON)
def test_milvus_23_standalone_is_dense_only(milvus_standalone: str) -> None:
    s = MilvusResidentStore(milvus_standalone, "dense23")
    try:
        s.drop()
        s = MilvusResidentStore(milvus_standalone, "dense23")
        assert not s.fulltext
        s.write_documents([_doc(name, [text]) for name, text in TEXTS.items()])
        v = s.vectors(["d-pump:0"])[0]
        assert s.dense_search(v, 1)[0][0] == "d-pump:0"
        assert s.dense_search(v, 4, 'metadata["file_type"] == "text"')[0][0] != "d-pump:0"
        with pytest.raises(ConfigError, match="2.5"):
            s.bm25_search("pump", 1)
        s.write_document(*_doc("pump", ["a", "b"]))
        s.delete_document("d-sso")
        assert s.count() == (3, 4)
    finally:
        s.drop()
        s.close()
