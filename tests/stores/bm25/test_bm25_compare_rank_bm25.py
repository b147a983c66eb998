"""Comparison tests: our scores against rank_bm25 (the reference) on the same tokens.

Okapi on the codebase corpus and a Chinese corpus: every document's score for 50 queries to 1e-6 relative, and
identical top-10 lists; BM25+ and BM25L too; and an index built incrementally (with deletes and replacements)
scores exactly like rank_bm25 built from scratch on the surviving documents.
"""
from __future__ import annotations

import numpy as np
import pytest
import rank_bm25

from corpora import chinese_corpus, chinese_queries, codebase_chunks, codebase_queries
from ctxrag.stores.bm25 import BM25Index, make_tokenizer

REFERENCE = {"okapi": rank_bm25.BM25Okapi, "bm25+": rank_bm25.BM25Plus, "bm25l": rank_bm25.BM25L}


def _reference_top_k(reference, query_tokens, scores, k):
    """rank_bm25's ranking restricted to documents containing a query term (our `search` contract),
    ties by position."""
    terms = set(query_tokens)
    matched = np.array([any(t in doc for t in terms) for doc in reference.doc_freqs])
    order = [i for i in np.argsort(-scores, kind="stable") if matched[i]]
    return order[:k]


def _assert_same(index, reference, queries_tokens, ids):
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    assert index.ids == ids
    n_compared = 0
    for tokens in queries_tokens:
        ours = index.get_scores(tokens)
        ref = reference.get_scores(tokens)
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-12)
        top = [position[doc_id] for doc_id, _ in index.search(tokens, k=10)]
        assert top == _reference_top_k(reference, tokens, ref, 10)
        n_compared += bool(top)
    assert n_compared >= len(queries_tokens) * 0.8  # the comparison must actually rank something


@pytest.fixture(scope="module")
def codebase():
    tokenizer = make_tokenizer("code")
    chunks = codebase_chunks()
    docs = [tokenizer(c["text"]) for c in chunks]
    queries = [tokenizer(q) for q in codebase_queries(50)]
    return [c["id"] for c in chunks], docs, queries


@pytest.fixture(scope="module")
def chinese():
    tokenizer = make_tokenizer("chinese")
    docs = [tokenizer(t) for t in chinese_corpus(400)]
    queries = [tokenizer(q) for q in chinese_queries(50)]
    return [f"zh{i}" for i in range(len(docs))], docs, queries


@pytest.mark.parametrize("variant", sorted(REFERENCE))
@pytest.mark.parametrize("corpus", ["codebase", "chinese"])
def test_scores_and_top10_equal_rank_bm25(corpus, variant, request):
    ids, docs, queries = request.getfixturevalue(corpus)
    index = BM25Index(tokenizer="code", variant=variant)
    index.add_tokens(docs, ids=ids)
    _assert_same(index, REFERENCE[variant](docs), queries, ids)


def test_repeated_query_tokens_count_twice(codebase):
    ids, docs, _ = codebase
    index = BM25Index(variant="okapi")
    index.add_tokens(docs, ids=ids)
    once = index.get_scores(["fuzzer"])
    np.testing.assert_allclose(index.get_scores(["fuzzer", "fuzzer"]), 2 * once)
    np.testing.assert_allclose(index.get_scores(["fuzzer", "fuzzer"]),
                               rank_bm25.BM25Okapi(docs).get_scores(["fuzzer", "fuzzer"]), rtol=1e-6)


def test_negative_idf_uses_epsilon_times_mean_idf():
    # "common" is in 3 of 4 documents: negative idf, floored at epsilon * average idf
    docs = [["common", "a"], ["common", "b"], ["common", "c"], ["d"]]
    index = BM25Index(variant="okapi", epsilon=0.5)
    index.add_tokens(docs)
    ref = rank_bm25.BM25Okapi(docs, epsilon=0.5)
    assert ref.idf["common"] == pytest.approx(0.5 * ref.average_idf)
    np.testing.assert_allclose(index.get_scores(["common", "a"]), ref.get_scores(["common", "a"]), rtol=1e-12)


@pytest.mark.parametrize("variant", sorted(REFERENCE))
@pytest.mark.parametrize("corpus", ["codebase", "chinese"])
def test_incremental_index_scores_like_one_built_from_scratch(corpus, variant, request):
    ids, docs, queries = request.getfixturevalue(corpus)
    rng = np.random.default_rng(7)
    index = BM25Index(variant=variant)
    live: dict[str, list[str]] = {}
    cuts = sorted(rng.choice(np.arange(1, len(docs)), size=12, replace=False).tolist())
    for start, end in zip([0, *cuts], [*cuts, len(docs)]):
        index.add_tokens(docs[start:end], ids=ids[start:end])
        live.update(zip(ids[start:end], docs[start:end]))
        doomed = rng.choice(list(live), size=min(15, len(live) // 4), replace=False).tolist()
        index.delete(doomed)
        for doc_id in doomed:
            del live[doc_id]
    # replacing a document keeps its id but moves it to the end, as a fresh add does
    replaced = list(live)[:5]
    index.add_tokens([live[i][::-1] + ["fuzzer"] for i in replaced], ids=replaced)
    for doc_id in replaced:
        live[doc_id] = live.pop(doc_id)[::-1] + ["fuzzer"]
    assert len(index) == len(live) and len(index._blocks) > 1
    _assert_same(index, REFERENCE[variant](list(live.values())), queries, list(live))
    index.compact()
    _assert_same(index, REFERENCE[variant](list(live.values())), queries, list(live))
