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


class _Stopped(BaseException):
    """A write stopped at a chosen call, as a kill -9 would stop it (no handler in the store runs)."""


def _stop_at(store: MilvusResidentStore, moment: str) -> None:
    """Make `store`'s next replace of a document with "new" chunks stop at `moment` (see `MOMENTS`)."""
    client = store._client
    upsert, delete, swapped = client.upsert, client.delete, []

    def stop_upsert(name, data, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        status = data[0].get("status") if name == store.docs_name and data else None
        swapped.extend([1] if status == cols.STATUS_OK else [])
        if (moment, name) in {("staging", store.staging_name), ("swapping", store.chunks_name)} \
                and any("new" in str(r.get("content")) for r in data):
            upsert(name, data[:1], *args, **kwargs)
            raise _Stopped(moment)
        if moment == "staged" and status == cols.STATUS_SWAPPING:
            raise _Stopped(moment)
        return upsert(name, data, *args, **kwargs)

    def stop_delete(name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if (moment, name) == ("stale", store.chunks_name) or (moment, name) == ("marked", store.staging_name) \
                and swapped:
            raise _Stopped(moment)
        return delete(name, *args, **kwargs)

    client.upsert, client.delete = stop_upsert, stop_delete


def _writer_gone(store: MilvusResidentStore) -> None:
    """The stopped writer (this process) is gone, as after a kill -9: its staging markers now name a pid that no
    longer runs on this host."""
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    client = store._client
    if not client.has_collection(store.staging_name):
        return
    client.load_collection(store.staging_name)
    for row in client.query(store.staging_name, filter="chunk_index < 0", output_fields=["*"]):
        row = {k: v for k, v in row.items() if k != "bm25"}  # a function's output is not written
        client.upsert(store.staging_name, [{**row, "metadata": {**row["metadata"], "pid": gone.pid}}])


OLD, NEW = ["old one", "old two", "old three"], ["new one", "new two"]
MOMENTS = {"staging": OLD, "staged": OLD, "swapping": NEW, "stale": NEW, "marked": NEW}
"""Where a replace of d-a (three chunks by two) stops -> the version every read must show whole."""


def _seen(s: MilvusResidentStore) -> list[list[str]]:
    """d-a's chunk texts as each read path shows them (listed, by doc, by id, scanned, and in each search)."""
    def texts(ids: list[str]) -> list[str]:
        got = s.get_chunks(ids)
        return [got[c].content for c in sorted(got) if c.startswith("d-a:")]

    listed = [d.text for d in s.list_documents() if d.doc_id == "d-a"]
    v = s.vectors(["d-b:0"])[0]
    hits = [s.bm25_search("old new one two three", 10), s.dense_search(v, 10), s.hybrid_search(v, "one two", 10)]
    out = [listed[0].split("\n") if listed else [], [r.content for r in s.chunks_of("d-a")],
           texts(["d-a:0", "d-a:1", "d-a:2"]), sorted(r.content for r in s.iter_chunks() if r.doc_id == "d-a")]
    out += [texts([c for c, _ in h]) for h in hits]
    assert len(s.vectors([c for c in sorted(s.chunk_ids()) if c.startswith("d-a:")])) == len(out[1])
    return [sorted(t) for t in out]


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_replace_stopped_at_each_step_reads_as_one_whole_version(tmp_path: Path, moment: str) -> None:
    """Old version until the row switches to the staged copy, new from then on, on every read path; then
    `reconcile` (kb repair) swaps the staged copy in when the old version was being overwritten, otherwise keeps
    the stored version and deletes the copy. Before: from the swap on, the document was unlisted, `chunks_of` and
    the searches mixed both versions."""
    s = MilvusResidentStore(tmp_path / "s.db", "s")
    try:
        s.write_documents([_doc("a", OLD), _doc("b", ["keep me one"])])
        _stop_at(s, moment)
        with pytest.raises(_Stopped):
            s.write_document(*_doc("a", NEW))
        del s._client.upsert, s._client.delete
        _writer_gone(s)
        want = sorted(MOMENTS[moment])
        assert _seen(s) == [want] * 7
        report = s.reconcile(grace_s=0, orphans=True)
        if moment in ("swapping", "stale"):
            assert report.swapped == ["d-a"] and not report.unstaged
        else:
            assert list(report.unstaged) == ["d-a"] and "kept the stored version" in report.unstaged["d-a"]
        assert _seen(s) == [want] * 7 and s.stagings() == {} and s.document_state("d-a").status == cols.STATUS_OK
        assert not s.reconcile(grace_s=0, orphans=True).changed
    finally:
        s.close()


@pytest.mark.parametrize("moment", ["staging", "swapping"])
def test_a_live_writers_staged_copy_is_left_alone_and_the_next_write_finishes_a_dead_ones(
        tmp_path: Path, moment: str) -> None:
    s = MilvusResidentStore(tmp_path / "l.db", "l")
    try:
        s.write_documents([_doc("a", OLD), _doc("b", ["keep me one"])])
        _stop_at(s, moment)
        with pytest.raises(_Stopped):
            s.write_document(*_doc("a", NEW))
        del s._client.upsert, s._client.delete
        report = s.reconcile(grace_s=0, orphans=True)  # the marker names this process: its writer runs
        assert report.in_flight == ["d-a"] and not report.changed and set(s.stagings()) == {"d-a"}
        assert not s.settle_stagings().changed
        s.write_document(*_doc("a", NEW))  # the next write of the document completes it
        assert _seen(s) == [sorted(NEW)] * 7 and s.stagings() == {}
    finally:
        s.close()


def test_a_new_document_half_written_names_its_writer_left_alone_while_it_runs_dropped_once_gone(
        tmp_path: Path) -> None:
    """A new document stopped after its first chunk: its ``writing`` row names this process, so `reconcile` (kb
    repair) leaves it alone; once that pid is gone it is dropped as before. Readers never see the writer."""
    import os

    s = MilvusResidentStore(tmp_path / "n.db", "n")
    try:
        s.write_document(*_doc("b", ["keep me one"]))
        _stop_at(s, "swapping")  # no stored version of d-a: its first chunk, then stop
        with pytest.raises(_Stopped):
            s.write_document(*_doc("a", NEW))
        del s._client.upsert, s._client.delete
        (row,) = s.doc_rows('doc_id == "d-a"')
        assert row["status"] == cols.STATUS_WRITING and cols.row_writer(row)["pid"] == os.getpid()
        assert cols.ROW_WRITER not in s.get_document("d-a").metadata
        report = s.reconcile(grace_s=0, orphans=True)
        assert report.in_flight == ["d-a"] and not report.changed and s.chunk_ids() >= {"d-a:0"}
        import subprocess
        import sys

        gone = subprocess.Popen([sys.executable, "-c", ""])
        gone.wait()
        s.update_row(row, metadata=cols.with_writer(row["metadata"], {**cols.row_writer(row), "pid": gone.pid}))
        report = s.reconcile(grace_s=0, orphans=True)
        assert report.dropped == ["d-a"] and s.document_state("d-a") is None and s.chunks_of("d-a") == []
        s.write_document(*_doc("a", NEW))
        (row,) = s.doc_rows('doc_id == "d-a"')
        assert row["status"] == cols.STATUS_OK and cols.ROW_WRITER not in row["metadata"]
        assert [r.content for r in s.chunks_of("d-b")] == ["keep me one"]
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
