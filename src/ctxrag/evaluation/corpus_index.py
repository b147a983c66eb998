"""The in-memory indexes an evaluation builds over a dataset's corpus, and the retriever that reads them.

A benchmark corpus is not a knowledge base: it has no documents to load or split, only chunk ids and texts. So the
runner indexes the texts directly (FAISS for dense, `BM25ChunkIndex` for BM25) and wraps each index in an
`IndexRetriever`; fusion, rerank and graph ranking come from the same library code users call.

Example::

    from ctxrag.evaluation.corpus_index import IndexRetriever
    r = IndexRetriever(search=lambda q, k: [("a", 1.0)], texts={"a": "alpha"}, k=5, score_key="bm25_score")
    r.invoke("alpha")[0].id   # 'a'
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from ctxrag.models.embeddings import embed_array
from ctxrag.stores.bm25 import BM25ChunkIndex
from ctxrag.schema import CHUNK_ID, SCORE
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.dense import FaissIndex
from ctxrag.stores.embedding import attach_vectors

EMBED_BATCH = 32


class IndexRetriever(BaseRetriever):
    """A LangChain retriever over a ``search(query, k) -> [(chunk_id, score)]`` function and the eval corpus.

    Example::

        IndexRetriever(search=lambda q, k: [("a", 1.0)], texts={"a": "alpha"}, k=5, score_key="bm25_score")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    search: Callable[[str, int], list[tuple[str, float]]]
    texts: dict[str, str]
    k: int = 10
    score_key: str = SCORE

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [
            Document(page_content=self.texts[cid], id=cid,
                     metadata={CHUNK_ID: cid, SCORE: float(s), self.score_key: float(s)})
            for cid, s in self.search(query, self.k)
        ]


@dataclass
class CorpusVariant:
    """One distinct set of indexed texts (plain, or with contexts) and the indexes built over it, each once."""

    key: str
    texts: dict[str, str]
    dense: Any = None
    dense_seconds: float = 0.0
    bm25: Any = None
    bm25_seconds: float = 0.0
    graph: Any = None
    graph_seconds: float = 0.0


def indexed_text(text: str, context: str | None) -> str:
    """What a contextual index sees: ``context + "\\n\\n" + chunk`` (the chunk alone without a context)."""
    return f"{context.strip()}\n\n{text}" if context and context.strip() else text


def build_dense_index(texts: Mapping[str, str], contents: Mapping[str, str], embeddings: Embeddings, *,
                      progress: bool = False) -> FaissIndex:
    """A flat FAISS index over `texts` (chunk id -> indexed text); `contents` is each chunk's text without context."""
    chunks = attach_vectors([IndexedChunk(c, c, t, contents[c]) for c, t in texts.items()],
                            lambda batch: embed_array(embeddings, batch, is_query=False), batch_size=EMBED_BATCH,
                            progress=progress, desc="embedding corpus")
    index = FaissIndex()
    index.add(chunks)
    return index


def build_bm25_index(texts: Mapping[str, str], contents: Mapping[str, str]) -> BM25ChunkIndex:
    """A BM25 index over `texts` (chunk id -> indexed text)."""
    index = BM25ChunkIndex()
    index.add([IndexedChunk(c, c, t, contents[c]) for c, t in texts.items()])
    return index


def query_vector(embeddings: Embeddings, query: str) -> np.ndarray:
    """The query's vector from the uncached model: latency should include embedding the query, as in real use."""
    model = getattr(embeddings, "inner", embeddings)
    return embed_array(model, [query], is_query=True)[0]


def dense_retriever(index: FaissIndex, texts: dict[str, str], embeddings: Embeddings, k: int) -> IndexRetriever:
    """Dense search over `index` as a retriever (scores in ``dense_score``)."""
    return IndexRetriever(search=lambda q, kk: index.search(query_vector(embeddings, q), kk), texts=texts, k=k,
                          score_key="dense_score", name="dense")


def bm25_retriever(index: BM25ChunkIndex, texts: dict[str, str], k: int) -> IndexRetriever:
    """BM25 search over `index` as a retriever (scores in ``bm25_score``)."""
    return IndexRetriever(search=lambda q, kk: index.search(q, kk), texts=texts, k=k, score_key="bm25_score",
                          name="bm25")


def timed(build: Callable[[], Any]) -> tuple[Any, float]:
    """``(build(), seconds it took)``."""
    start = time.perf_counter()
    out = build()
    return out, time.perf_counter() - start
