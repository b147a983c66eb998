"""LongContextReorder: same placement as langchain_community's LongContextReorder, as a document compressor."""
from __future__ import annotations

import asyncio
import warnings

import pytest
from langchain_core.documents import Document

from ctxrag.compressors.reorder import LongContextReorder, lost_in_the_middle

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_community.document_transformers import LongContextReorder as CommunityReorder


def docs(n: int) -> list[Document]:
    return [Document(str(i), id=str(i)) for i in range(1, n + 1)]


def test_empty_and_single():
    assert lost_in_the_middle([]) == []
    assert [d.id for d in lost_in_the_middle(docs(1))] == ["1"]


def test_best_at_the_ends_worst_in_the_middle():
    assert [d.id for d in LongContextReorder().compress_documents(docs(5), "q")] == ["1", "3", "5", "4", "2"]
    assert [d.id for d in LongContextReorder().compress_documents(docs(4), "q")] == ["2", "4", "3", "1"]


@pytest.mark.parametrize("n", range(0, 13))
def test_parity_with_langchain_community(n):
    expected = [d.id for d in CommunityReorder().transform_documents(docs(n))]
    assert [d.id for d in LongContextReorder().compress_documents(docs(n), "q")] == expected


def test_input_untouched_and_async():
    original = docs(6)
    out = asyncio.run(LongContextReorder().acompress_documents(original, "q"))
    assert [d.id for d in original] == ["1", "2", "3", "4", "5", "6"]
    assert sorted(d.id for d in out) == [d.id for d in original]


def test_is_a_document_transformer_like_langchains():
    from langchain_core.documents import BaseDocumentTransformer

    reorder = LongContextReorder()
    assert isinstance(reorder, BaseDocumentTransformer)
    for n in range(0, 7):
        expected = [d.id for d in CommunityReorder().transform_documents(docs(n))]
        assert [d.id for d in reorder.transform_documents(docs(n))] == expected
        assert [d.id for d in asyncio.run(reorder.atransform_documents(docs(n)))] == expected
    with pytest.raises(TypeError, match="query"):
        reorder.transform_documents(docs(2), query="q")
