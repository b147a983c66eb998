"""BM25Index core behaviour: search, filters, add/replace/delete, ids, and bad input."""
from __future__ import annotations

import numpy as np
import pytest
import rank_bm25

from ctxrag.errors import ConfigError
from ctxrag.stores.bm25 import BM25Index

TEXTS = ["the quick brown fox", "a lazy brown dog", "quick quick search engine", "向量检索和关键词检索", "hello world",
         "nothing to see"]


@pytest.fixture
def index():
    idx = BM25Index(tokenizer="mixed")
    idx.add(TEXTS, ids=["fox", "dog", "search", "zh", "hello", "nothing"])
    return idx


def test_empty_corpus_searches_to_nothing():
    idx = BM25Index()
    assert len(idx) == 0 and idx.search("anything") == [] and idx.get_scores("anything").shape == (0,)
    idx.add([])
    assert len(idx) == 0


def test_empty_query_and_stopword_only_query_return_nothing(index):
    assert index.search("") == []
    assert index.search("the a of and") == []
    assert index.search("unseenword") == []
    np.testing.assert_array_equal(index.get_scores(""), np.zeros(6))


def test_search_ranks_and_reports_scores(index):
    hits = index.search("quick", k=10)
    assert [h[0] for h in hits] == ["search", "fox"]
    assert hits[0][1] > hits[1][1] > 0
    assert index.search("关键词", k=1)[0][0] == "zh"


def test_k_limits_and_must_be_positive(index):
    assert len(index.search("brown", k=1)) == 1
    with pytest.raises(ValueError, match="k must be positive, got 0"):
        index.search("brown", k=0)


def test_ties_keep_insertion_order():
    idx = BM25Index(tokenizer=str.split)
    idx.add(["x y", "x z", "x w", "q"], ids=list("abcd"))
    assert [h[0] for h in idx.search("x", k=2)] == ["a", "b"]


def test_allowed_ids_filter(index):
    assert [h[0] for h in index.search("brown", allowed_ids={"dog", "nope"})] == ["dog"]
    assert index.search("brown", allowed_ids=set()) == []
    # filtering does not change scores
    full = dict(index.search("brown"))
    assert dict(index.search("brown", allowed_ids=["dog"]))["dog"] == full["dog"]


def test_add_with_existing_id_replaces(index):
    index.add(["completely different words"], ids=["fox"])
    assert len(index) == 6
    assert [h[0] for h in index.search("fox")] == []
    assert index.search("different")[0][0] == "fox"


def test_delete_unknown_and_repeated_ids(index):
    assert index.delete(["nope"]) == 0
    assert index.delete(["dog", "dog"]) == 1
    assert index.delete(["dog"]) == 0
    assert "dog" not in index and "fox" in index and len(index) == 5
    assert [h[0] for h in index.search("brown")] == ["fox"]


def test_delete_everything_then_add_again(index):
    index.delete(index.ids)
    assert len(index) == 0 and index.search("brown") == []
    index.add(["brown bear"], ids=["bear"])
    assert index.search("brown") == [("bear", pytest.approx(index.get_scores("brown")[0]))]


def test_duplicate_ids_in_one_call_and_mixed_id_modes_are_rejected():
    idx = BM25Index()
    with pytest.raises(ValueError, match="duplicate document id 'a'"):
        idx.add(["x", "y"], ids=["a", "a"])
    idx.add(["x"])
    with pytest.raises(ConfigError, match="for every add or for none"):
        idx.add(["y"], ids=["b"])
    with pytest.raises(ValueError, match="one string"):
        idx.add("not a list")


def test_automatic_ids_are_running_numbers_and_deletable():
    idx = BM25Index(tokenizer=str.split)
    idx.add(["a b", "b c"])
    idx.add(["c d"])
    assert idx.ids == ["0", "1", "2"]
    assert idx.delete(["1", "9", "x"]) == 1
    assert idx.ids == ["0", "2"] and [h[0] for h in idx.search("c")] == ["2"]


def test_one_megabyte_document_of_one_token():
    big = "spam " * 200_000  # 1 MB
    docs = [big, "spam eggs", "eggs ham"]
    idx = BM25Index(tokenizer="english")
    idx.add(docs, ids=["big", "small", "other"])
    tokens = [d.split() for d in docs]
    np.testing.assert_allclose(idx.get_scores("spam eggs"), rank_bm25.BM25Okapi(tokens).get_scores(["spam", "eggs"]),
                               rtol=1e-9)
    assert [h[0] for h in idx.search("spam")][0] in {"big", "small"}


def test_bad_parameters_are_rejected_early():
    with pytest.raises(ConfigError, match="'bm26'"):
        BM25Index(variant="bm26")
    with pytest.raises(ConfigError, match="bad BM25 parameters"):
        BM25Index(b=2.0)
    with pytest.raises(ValueError, match="list of strings"):
        BM25Index().search_slots("a string", 3)


def test_many_small_adds_keep_few_postings_blocks():
    idx = BM25Index(tokenizer=str.split)
    for i in range(300):
        idx.add([f"w{i} common"], ids=[f"d{i}"])
    assert len(idx._blocks) <= 10
    assert len(idx.search("common", k=500)) == 300


def test_term_doc_counts_of_deleted_rows_match_a_dense_count() -> None:
    """A delete subtracts, per term, how many deleted rows hold it (by binary search over the column pointers, so a
    few tombstones in a large postings block cost their own postings); empty columns and rows included."""
    from ctxrag.stores.bm25.blocks import PostingsBlock

    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 40))
        lengths = rng.integers(0, 8, n)
        block = PostingsBlock.from_token_ids(rng.integers(0, 25, int(lengths.sum())).astype(np.int32), lengths, 25)
        rows = rng.random(n) < 0.3
        dense = block.to_scipy(25).toarray() > 0
        assert block.term_doc_counts(rows, 30).tolist() == [*dense[rows].sum(axis=0).tolist(), 0, 0, 0, 0, 0]


def test_iter_ids_is_ids_in_blocks():
    idx = BM25Index(tokenizer="english")
    idx.add([f"text number {i}" for i in range(7)], ids=[f"c{i}" for i in range(7)])
    idx.delete(["c2", "c5"])
    assert list(idx.iter_ids(block=2)) == idx.ids == ["c0", "c1", "c3", "c4", "c6"]
