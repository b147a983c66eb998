"""Bulk import of chunks with precomputed vectors into a real knowledge base (SQLite, FAISS, BM25): good files land in
one new generation; bad records are named by line/row and nothing is written; a failure mid-write rolls back;
re-import skips or replaces; the `ctxrag import` command; Parquet; Milvus Lite (batched inserts)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ctxrag.indexing.bulk_import import BulkImportError, kb_dimension, read_precomputed
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings

DIM = 8
runner = CliRunner()


def _vec(i: int) -> list[float]:
    v = np.zeros(DIM)
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.25
    return v.tolist()


GOOD = [
    {"text": "The Falcon-7 pump moves 40 litres per minute.", "vector": _vec(0), "source": "wiki://falcon",
     "title": "Falcon", "metadata": {"team": "pumps"}},
    {"text": "Falcon pumps were designed in Oslo.", "vector": _vec(1), "source": "wiki://falcon"},
    {"text": "The Heron-3 valve closes in two seconds.", "vector": _vec(2), "source": "wiki://heron",
     "metadata": {"team": "valves"}},
    {"text": "星河知识库支持 Markdown 文件。", "vector": _vec(3)},
]


def _settings(home: Path, **kw: object) -> Settings:
    return Settings(home=home, embeddings={"provider": "fake", "dimensions": DIM}, **kw)


def _write(path: Path, rows: list[object]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _import(kb: KnowledgeBase, path: Path, **kw: object):  # noqa: ANN202
    return kb.import_precomputed(read_precomputed(path, kb.name, dim=kb_dimension(kb.dense_index(), kb.settings), **kw))


@pytest.fixture
def kb(tmp_path: Path):  # noqa: ANN201
    kb = KnowledgeBase.open("bulk", _settings(tmp_path / "home"))
    yield kb
    kb.close()


def test_import_adds_documents_chunks_dense_and_bm25_in_one_generation(kb: KnowledgeBase, tmp_path: Path) -> None:
    path = _write(tmp_path / "chunks.jsonl", GOOD)
    report = _import(kb, path, batch_size=1)  # several batches, still one commit
    assert [f.status for f in report.files] == ["added"] * 3
    assert kb.generation == 1
    assert kb.stats()["chunks"] == 4 and kb.stats()["indexes"] == {"dense": 4, "bm25": 4}
    falcon = kb.get_document("wiki://falcon")
    assert falcon.n_chunks == 2 and falcon.title == "Falcon"
    assert falcon.text == GOOD[0]["text"] + "\n\n" + GOOD[1]["text"]
    q = np.asarray(_vec(2), dtype=np.float32)
    q /= np.linalg.norm(q)
    top = kb.dense_index().search(q, k=1)[0]
    assert kb.chunks.get_chunks([top[0]])[0].page_content == GOOD[2]["text"] and top[1] == pytest.approx(1.0, abs=1e-5)
    hits = kb.search("Oslo", k=3, mode="bm25")
    assert hits[0].page_content == GOOD[1]["text"] and len(hits) == 3  # BM25 fills to k, as LangChain's does
    assert hits[0].metadata["bm25_score"] > 0 and all(h.metadata["bm25_score"] == 0 for h in hits[1:])
    assert hits[0].metadata["source"] == "wiki://falcon" and hits[0].metadata["chunk_index"] == 1
    # user metadata is kept on the chunk and filters work
    assert [d.page_content for d in kb.search("Falcon Heron", k=5, mode="bm25", filter={"team": "valves"})] == [GOOD[2]["text"]]
    # a record without source is its own document named after the file and line
    assert kb.get_document("chunks.jsonl#4").n_chunks == 1
    kb.close()
    again = KnowledgeBase.open("bulk", kb.settings)
    try:
        assert again.stats()["indexes"] == {"dense": 4, "bm25": 4}
        assert again.dense_index().search(q, k=1)[0][0] == top[0]
    finally:
        again.close()


def test_bad_lines_are_named_and_nothing_is_written(kb: KnowledgeBase, tmp_path: Path) -> None:
    _import(kb, _write(tmp_path / "first.jsonl", GOOD[:1]))
    before = (kb.generation, kb.stats()["chunks"], len(kb.dense_index()), len(kb.indexes["bm25"]))
    rows: list[object] = [
        GOOD[1],                                                        # 1 good
        '{"text": "broken", "vector": [1, 2',                           # 2 bad JSON
        "",                                                             # 3 blank: skipped
        {"vector": _vec(1)},                                            # 4 missing text
        {"text": "short", "vector": [1.0, 0.0, 0.0]},                   # 5 wrong dimension
        '{"text": "nan", "vector": [NaN, 0, 0, 0, 0, 0, 0, 1]}',        # 6 non-finite
        {"text": "zeros", "vector": [0.0] * DIM},                       # 7 zero vector
        {"text": "typo", "vectors": _vec(1)},                           # 8 missing vector
        {"text": "extra", "vector": _vec(1), "colour": "red"},          # 9 unknown field
        GOOD[2],                                                        # 10 good
    ]
    path = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(BulkImportError) as info:
        _import(kb, path)
    err = info.value
    assert [n for n, _ in err.errors] == [2, 4, 5, 6, 7, 8, 9]
    reasons = dict(err.errors)
    assert "not valid JSON" in reasons[2] and "'text'" in reasons[4]
    assert "dimension 3" in reasons[5] and f"dimension is {DIM}" in reasons[5]
    assert "finite" in reasons[6] and "zeros" in reasons[7] and "'vector'" in reasons[8] and "colour" in reasons[9]
    assert f"{path}:line 5:" in str(err) and "nothing was imported" in str(err)
    assert (kb.generation, kb.stats()["chunks"], len(kb.dense_index()), len(kb.indexes["bm25"])) == before
    assert not any("Heron" in d.page_content for d in kb.search("Heron", k=3, mode="bm25"))


def test_max_errors_stops_reading(kb: KnowledgeBase, tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", [{"text": "x"}] * 10)
    with pytest.raises(BulkImportError) as info:
        _import(kb, path, max_errors=3)
    assert [n for n, _ in info.value.errors] == [1, 2, 3] and "stopped after 3" in str(info.value)


def test_first_record_sets_the_dimension_of_an_empty_kb_with_an_unknown_model(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", [GOOD[0], {"text": "y", "vector": [1.0, 2.0]}])
    with pytest.raises(BulkImportError) as info:
        list(read_precomputed(path, "kb", dim=None))
    assert info.value.errors[0][0] == 2 and "dimension 2" in info.value.errors[0][1]


def test_sources_must_be_contiguous(kb: KnowledgeBase, tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", [GOOD[0], GOOD[2], GOOD[1]])
    with pytest.raises(BulkImportError) as info:
        _import(kb, path)
    assert info.value.errors[0][0] == 3 and "contiguous" in info.value.errors[0][1]
    assert kb.generation == 0 and kb.stats()["chunks"] == 0


def test_failure_while_writing_rolls_everything_back(kb: KnowledgeBase, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _import(kb, _write(tmp_path / "first.jsonl", GOOD[:2]))
    bm25 = type(kb.indexes["bm25"])
    calls = {"n": 0}
    real_add = bm25.add

    def add_then_fail(self, chunks):  # noqa: ANN001, ANN202
        calls["n"] += 1
        if calls["n"] == 2:  # the second batch: the first one is already in SQLite and the in-memory indexes
            raise OSError("disk full")
        return real_add(self, chunks)

    monkeypatch.setattr(bm25, "add", add_then_fail)
    more = [{"text": f"extra chunk {i}", "vector": _vec(i), "source": f"wiki://extra{i}"} for i in range(4)]
    with pytest.raises(OSError, match="disk full"):
        _import(kb, _write(tmp_path / "more.jsonl", more), batch_size=2)
    monkeypatch.undo()
    assert kb.generation == 1 and kb.stats()["documents"] == 1 and kb.stats()["chunks"] == 2
    assert len(kb.dense_index()) == 2 and len(kb.indexes["bm25"]) == 2 and not any("extra" in d.page_content for d in kb.search("extra", k=5, mode="bm25"))


def test_reimport_skips_identical_and_replaces_changed_sources(kb: KnowledgeBase, tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", GOOD[:3])
    _import(kb, path)
    report = _import(kb, path)
    assert [f.status for f in report.files] == ["skipped", "skipped"] and kb.generation == 1
    changed = [dict(GOOD[0], vector=_vec(5)), GOOD[2]]  # falcon now has one chunk with a new vector
    report = _import(kb, _write(tmp_path / "c2.jsonl", changed))
    assert [f.status for f in report.files] == ["updated", "skipped"] and kb.generation == 2
    assert kb.get_document("wiki://falcon").n_chunks == 1 and kb.stats()["chunks"] == 2 and len(kb.dense_index()) == 2
    q = np.asarray(_vec(5), dtype=np.float32)
    assert kb.chunks.get_chunks([kb.dense_index().search(q / np.linalg.norm(q), k=1)[0][0]])[0].page_content == GOOD[0]["text"]
    assert not any("Oslo" in d.page_content for d in kb.search("Oslo", k=3, mode="bm25"))


def test_cli_import_and_bad_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxrag.cli.main import app

    home = tmp_path / "cli-home"
    monkeypatch.setenv("CTXRAG_EMBEDDINGS__PROVIDER", "fake")
    monkeypatch.setenv("CTXRAG_EMBEDDINGS__DIMENSIONS", str(DIM))
    good = _write(tmp_path / "good.jsonl", GOOD)
    res = runner.invoke(app, ["--home", str(home), "import", str(good), "--kb", "wiki", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary == {"kb": "wiki", "file": str(good), "added": 3, "updated": 0, "skipped": 0, "chunks": 4, "generation": 1}
    bad = _write(tmp_path / "bad.jsonl", [GOOD[0], {"text": "t", "vector": [1.0]}])
    res = runner.invoke(app, ["--home", str(home), "import", str(bad), "--kb", "wiki"])
    assert res.exit_code == 1
    assert "line 2" in res.stderr and f"dimension is {DIM}" in res.stderr
    res = runner.invoke(app, ["--home", str(home), "import", str(tmp_path / "chunks.csv"), "--kb", "wiki"])
    assert res.exit_code == 1 and "no such import file" in res.stderr


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow not installed (Parquet import is optional)")
def test_parquet_import_names_bad_rows(kb: KnowledgeBase, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [dict(r, metadata=json.dumps(r.get("metadata", {}))) for r in GOOD[:3]]
    table = pa.Table.from_pylist([{"text": r["text"], "vector": r["vector"], "source": r.get("source"),
                                   "metadata": r["metadata"]} for r in rows])
    pq.write_table(table, tmp_path / "c.parquet")
    report = _import(kb, tmp_path / "c.parquet")
    assert len(report.added) == 2 and kb.stats()["chunks"] == 3
    bad = pa.Table.from_pylist([{"text": "ok", "vector": _vec(1)}, {"text": "", "vector": _vec(2)},
                                {"text": "nan", "vector": [float("nan")] + _vec(3)[1:]}, {"text": "d", "vector": [1.0, 2.0]}])
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(BulkImportError) as info:
        _import(kb, tmp_path / "bad.parquet")
    assert [n for n, _ in info.value.errors] == [2, 3, 4] and "row 2" in str(info.value)
    assert "finite" in info.value.errors[1][1] and "dimension 2" in info.value.errors[2][1]
    assert kb.stats()["chunks"] == 3
    # float32 fixed-size vectors (what a GPU job writes) go through as one block
    vecs = pa.FixedSizeListArray.from_arrays(pa.array(np.asarray([_vec(6), _vec(7)], "float32").reshape(-1)), DIM)
    pq.write_table(pa.table({"text": ["six", "seven"], "vector": vecs, "source": ["pq://a", "pq://a"]}), tmp_path / "f.parquet")
    assert [f.chunks for f in _import(kb, tmp_path / "f.parquet").added] == [2] and kb.stats()["chunks"] == 5


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("pymilvus", "milvus_lite")),
                    reason="pymilvus / milvus-lite not installed (pip install 'ctxrag[milvus]')")
def test_import_into_milvus_lite_in_batches(tmp_path: Path) -> None:
    from ctxrag.stores.vectors import milvus

    kb = KnowledgeBase.open("bulkm", _settings(tmp_path / "home", dense_backend="milvus", milvus_sparse=False))
    try:
        rows = [{"text": f"chunk number {i}", "vector": _vec(i), "source": f"wiki://{i // 3}"} for i in range(25)]
        old_batch = milvus._BATCH
        milvus._BATCH = 10  # several upserts per add
        try:
            report = _import(kb, _write(tmp_path / "m.jsonl", rows), batch_size=7)
        finally:
            milvus._BATCH = old_batch
        assert len(report.added) == 9 and len(kb.dense_index()) == 25 and kb.stats()["chunks"] == 25
        q = np.asarray(_vec(4), dtype=np.float32)
        top = kb.dense_index().search(q / np.linalg.norm(q), k=3)
        assert {c for c, _ in top} >= {kb.get_document("wiki://1").doc_id + ":1"}
    finally:
        kb.close()


@pytest.mark.parametrize("vector, unit", [([1e308, 1e308, 0.0], [0.70710677, 0.70710677, 0.0]),
                                          ([5e-324, 0.0, 0.0], [1.0, 0.0, 0.0]),
                                          ([-1e-310, 1e-310, 0.0], [-0.70710677, 0.70710677, 0.0])])
def test_huge_and_tiny_vectors_are_normalised_not_called_all_zeros(tmp_path: Path, vector: list[float],
                                                                   unit: list[float]) -> None:
    path = tmp_path / "extreme.jsonl"
    path.write_text(json.dumps({"text": "an extreme vector", "vector": vector, "source": "s"}) + "\n",
                    encoding="utf-8")
    [[doc]] = list(read_precomputed(path, "kb", dim=None))
    np.testing.assert_allclose(doc.vectors[0], unit, rtol=1e-6)
    zeros = tmp_path / "zeros.jsonl"
    zeros.write_text(json.dumps({"text": "zeros", "vector": [0.0, 0.0, 0.0], "source": "z"}) + "\n", encoding="utf-8")
    with pytest.raises(BulkImportError, match="all zeros"):
        list(read_precomputed(zeros, "kb", dim=None))
