"""Save/load: JSON + .npz round trip (memory-mapped), tokenizer handling, and damaged files failing loudly."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ctxrag.errors import ConfigError, IndexCorruptError
from ctxrag.stores.bm25 import BM25Index
from ctxrag.stores.bm25.index import ARRAYS, MANIFEST

TEXTS = ["retrieval augmented generation", "向量检索和关键词检索", "getUserName returns a name", "BM25 keyword search",
         "hybrid search fuses dense and sparse", "中文分词使用结巴"]


@pytest.fixture
def saved(tmp_path):
    idx = BM25Index(tokenizer="mixed", variant="bm25+", k1=1.2)
    idx.add(TEXTS[:3], ids=["a", "b", "c"])
    idx.add(TEXTS[3:], ids=["d", "e", "f"])
    idx.delete(["e"])
    idx.save(tmp_path)
    return idx, tmp_path


def test_round_trip_is_exact_and_memory_mapped(saved):
    idx, path = saved
    loaded = BM25Index.load(path)
    assert loaded.ids == idx.ids and loaded.params == idx.params
    # mapped, as plain arrays over the map (slicing a np.memmap subclass runs Python code per slice)
    assert any(isinstance(s.indices.base, np.memmap) for s in loaded._blocks)
    assert not any(isinstance(a, np.memmap) for s in loaded._blocks for a in (s.indptr, s.indices, s.tf))
    for query in ["search", "检索", "user name", "the"]:
        np.testing.assert_array_equal(loaded.get_scores(query), idx.get_scores(query))
        assert loaded.search(query) == idx.search(query)
    # a loaded index keeps working incrementally
    loaded.add(["keyword keyword"], ids=["g"])
    loaded.delete(["a"])
    assert loaded.search("keyword")[0][0] == "g" and "a" not in loaded


def test_files_are_json_and_npz_without_pickle(saved):
    _, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["format"] == "ctxrag-bm25" and manifest["tokenizer"]["name"] == "mixed"
    with np.load(path / ARRAYS, allow_pickle=False) as arrays:
        assert "df" in arrays.files


def test_load_without_mmap(saved):
    idx, path = saved
    loaded = BM25Index.load(path, mmap=False)
    assert not any(isinstance(s.indices, np.memmap) or isinstance(s.indices.base, np.memmap)
                   for s in loaded._blocks)
    assert loaded.search("search") == idx.search("search")


def test_auto_ids_and_empty_index_round_trip(tmp_path):
    idx = BM25Index(tokenizer="english")
    idx.save(tmp_path / "empty")
    assert len(BM25Index.load(tmp_path / "empty")) == 0
    idx.add(["alpha beta", "beta gamma"])
    idx.save(tmp_path / "auto")
    loaded = BM25Index.load(tmp_path / "auto")
    assert loaded.ids == ["0", "1"] and loaded.search("gamma")[0][0] == "1"
    loaded.add(["gamma delta"])
    assert loaded.ids == ["0", "1", "2"]


def test_callable_tokenizer_must_be_passed_again(tmp_path):
    idx = BM25Index(tokenizer=str.split)
    idx.add(["a b", "b c"], ids=["x", "y"])
    idx.save(tmp_path)
    with pytest.raises(ConfigError, match="custom tokenizer"):
        BM25Index.load(tmp_path)
    assert BM25Index.load(tmp_path, tokenizer=str.split).search("c")[0][0] == "y"


def test_truncated_arrays_file(saved):
    _, path = saved
    data = (path / ARRAYS).read_bytes()
    (path / ARRAYS).write_bytes(data[: len(data) // 2])
    with pytest.raises(IndexCorruptError, match="bm25.npz"):
        BM25Index.load(path)


def test_truncated_or_garbage_manifest(saved):
    _, path = saved
    text = (path / MANIFEST).read_text()
    (path / MANIFEST).write_text(text[: len(text) // 2])
    with pytest.raises(IndexCorruptError, match="not valid JSON"):
        BM25Index.load(path)
    (path / MANIFEST).write_text('{"format": "something-else"}')
    with pytest.raises(IndexCorruptError, match="something-else"):
        BM25Index.load(path)


def test_missing_files(saved, tmp_path):
    _, path = saved
    with pytest.raises(IndexCorruptError, match="missing"):
        BM25Index.load(tmp_path / "nowhere")
    (path / ARRAYS).unlink()
    with pytest.raises(IndexCorruptError, match="bm25.npz"):
        BM25Index.load(path)


def test_same_size_garbage_arrays_file(saved):
    _, path = saved
    size = (path / ARRAYS).stat().st_size
    (path / ARRAYS).write_bytes(b"\x00" * size)
    with pytest.raises(IndexCorruptError, match="bm25.npz"):
        BM25Index.load(path)


def test_manifest_that_disagrees_with_arrays(saved):
    _, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["n_slots"] += 1
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptError, match="inconsistent"):
        BM25Index.load(path)
    manifest["n_slots"] -= 1
    manifest["vocab"] = manifest["vocab"][:-1]
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptError, match="inconsistent"):
        BM25Index.load(path)
    del manifest["segments"]
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptError, match="segments"):
        BM25Index.load(path)


V1_FIXTURE = Path(__file__).parent / "data" / "v1_explicit"
"""Saved by format version 1 (caller ids as a JSON list, one dead slot whose id was added again); see
`test_version_1_index_still_opens` for how it was built."""


def test_version_1_index_still_opens(tmp_path):
    texts = ["retrieval augmented generation", "dense and sparse retrieval", "getUserName returns a name",
             "BM25 keyword search", "hybrid search fuses dense and sparse", "keyword search again",
             "one more document", "another keyword here", "sparse vectors", "the last text"]
    rebuilt = BM25Index(tokenizer="english", variant="okapi")  # what the fixture holds, built by this code
    rebuilt.add(texts[:5], ids=["a", "b", "竹:0", "c", "d"])
    rebuilt.add(texts[5:], ids=["e", "f", "g", "h", "i"])
    rebuilt.delete(["e"])
    rebuilt.add(["sparse keyword retrieval"], ids=["a"])
    assert json.loads((V1_FIXTURE / MANIFEST).read_text())["version"] == 1
    old = BM25Index.load(V1_FIXTURE)
    assert old.ids == rebuilt.ids == ["b", "竹:0", "c", "d", "f", "g", "h", "i", "a"]
    assert "a" in old and "e" not in old and "竹:0" in old
    for query in ["keyword retrieval", "sparse", "name", "nothing"]:
        assert old.search(query, k=20) == rebuilt.search(query, k=20)
        assert old.search(query, k=3, allowed_ids=["a", "c", "e"]) == rebuilt.search(query, k=3, allowed_ids=["a", "c", "e"])
    old.delete(["a", "b"])
    old.add(["keyword"], ids=["b"])
    old.save(tmp_path)  # written again: the current version, ids as arrays
    again = BM25Index.load(tmp_path)
    assert json.loads((tmp_path / MANIFEST).read_text())["ids"] == {"mode": "arrays"}
    assert again.ids == ["竹:0", "c", "d", "f", "g", "h", "i", "b"] and again.search("keyword") == old.search("keyword")


V2_BLOCKS_FIXTURE = Path(__file__).parent / "data" / "v2_blocks"
"""Saved by format version 2 before the postings blocks were renamed from "segments" (two blocks, one dead slot): its
``seg{i}_*`` arrays and ``"segments"`` manifest list are the file format; see the test for how it was built."""


def test_postings_blocks_saved_under_their_old_names_still_open(tmp_path):
    texts = ["retrieval augmented generation", "dense and sparse retrieval", "getUserName returns a name",
             "BM25 keyword search", "hybrid search fuses dense and sparse", "keyword search again",
             "one more document", "another keyword here", "sparse vectors", "the last text"]
    rebuilt = BM25Index(tokenizer="english", variant="okapi")  # what the fixture holds, built by this code
    rebuilt.add(texts[:6], ids=[f"x{i}" for i in range(6)])
    rebuilt.add(texts[6:8], ids=["y0", "y1"])
    rebuilt.add(texts[8:], ids=["z0", "z1"])
    rebuilt.delete(["x1"])
    manifest = json.loads((V2_BLOCKS_FIXTURE / MANIFEST).read_text())
    assert manifest["version"] == 2 and [b["n_docs"] for b in manifest["segments"]] == [6, 4]
    with np.load(V2_BLOCKS_FIXTURE / ARRAYS, allow_pickle=False) as arrays:
        assert {"seg0_indptr", "seg1_tf"} <= set(arrays.files)
    old = BM25Index.load(V2_BLOCKS_FIXTURE)
    assert len(old._blocks) == len(rebuilt._blocks) == 2 and old.ids == rebuilt.ids and "x1" not in old
    for query in ["keyword retrieval", "sparse", "name", "nothing"]:
        assert old.search(query, k=20) == rebuilt.search(query, k=20)
        assert old.search(query, k=3, allowed_ids=["x0", "y1", "z0"]) == rebuilt.search(query, k=3,
                                                                                      allowed_ids=["x0", "y1", "z0"])
    old.save(tmp_path)  # written again by this version: the same names
    again = json.loads((tmp_path / MANIFEST).read_text())
    assert again["segments"] == manifest["segments"]
    assert BM25Index.load(tmp_path).search("sparse") == old.search("sparse")


def test_caller_ids_are_arrays_not_manifest_entries(saved):
    idx, path = saved
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["version"] == 2 and manifest["ids"] == {"mode": "arrays"}
    with np.load(path / ARRAYS, allow_pickle=False) as arrays:
        assert [bytes(b).decode() for b in arrays["doc_ids"]] == idx.ids
        assert arrays["doc_slots"].tolist() == np.flatnonzero(idx._live).tolist()


def test_saved_ids_that_disagree_with_the_live_mask(saved):
    _, path = saved
    with np.load(path / ARRAYS, allow_pickle=False) as z:
        arrays = {name: z[name] for name in z.files}
    arrays["doc_slots"] = arrays["doc_slots"].copy()
    arrays["doc_slots"][-1] = np.flatnonzero(~arrays["live"])[0]  # a dead slot, in order: e (4) is dead
    arrays["doc_slots"].sort()
    with open(path / ARRAYS, "wb") as fh:
        np.savez(fh, **arrays)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["arrays_bytes"] = (path / ARRAYS).stat().st_size
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptError, match="live documents"):
        BM25Index.load(path)
