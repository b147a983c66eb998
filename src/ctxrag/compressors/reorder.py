"""Lost-in-the-middle reordering (Liu et al., 2023, https://arxiv.org/abs/2307.03172).

Models read the start and end of a long context best, so the most relevant documents go to both ends and the least
relevant to the middle. Input: documents best first. Same order as langchain_community's `LongContextReorder`, and
both a `BaseDocumentTransformer` (``transform_documents``, as LangChain's) and a `BaseDocumentCompressor`, so it plugs
into `DocumentCompressorPipeline` and `ContextualCompressionRetriever` alike.

Example::

    from ctxrag.compressors.reorder import LongContextReorder
    [d.page_content for d in LongContextReorder().compress_documents(docs_1_to_5, "q")]
    # ['1', '3', '5', '4', '2']
    LongContextReorder().transform_documents(docs_1_to_5)   # the same, as a document transformer
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, BaseDocumentTransformer, Document


def lost_in_the_middle(documents: Sequence[Document]) -> list[Document]:
    """Best first in; out, the two best at the two ends and the worst in the middle.

    Walks from the worst document to the best, alternately prepending and appending (langchain's placement: with
    an odd count the best document opens the list, with an even count it closes it).
    """
    reordered: list[Document] = []
    for i, doc in enumerate(reversed(documents)):
        if i % 2 == 1:
            reordered.append(doc)
        else:
            reordered.insert(0, doc)
    return reordered


class LongContextReorder(BaseDocumentCompressor, BaseDocumentTransformer):
    """Puts the most relevant documents at the start and end of the list, the least relevant in the middle.

    Example::

        LongContextReorder().compress_documents([Document("1"), Document("2"), Document("3")], "q")  # 1, 3, 2
    """

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return lost_in_the_middle(documents)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return lost_in_the_middle(documents)

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        """`BaseDocumentTransformer` face: the same reordering, no query needed."""
        if kwargs:
            raise TypeError(f"LongContextReorder.transform_documents: unknown argument(s) {sorted(kwargs)}")
        return lost_in_the_middle(documents)

    async def atransform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        return self.transform_documents(documents, **kwargs)
