"""ctxrag's own BM25 index: exact (rank_bm25's scores), incremental, sparse-matrix scoring, for Chinese, English
and code. The retriever over it is `ctxrag.retrievers.bm25.BM25Retriever`.

>>> from ctxrag.stores.bm25 import BM25Index
>>> index = BM25Index(tokenizer="mixed")
>>> index.add(["向量检索和关键词检索", "BM25 keyword search"], ids=["zh", "en"])
>>> index.search("关键词", k=1)[0][0]
'zh'
"""
from __future__ import annotations

from ctxrag.stores.bm25.chunk_index import BM25ChunkIndex
from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.bm25.scoring import BM25Params, BM25Variant
from ctxrag.stores.bm25.tokenize import (
    ChineseTokenizer,
    EnglishTokenizer,
    MixedTokenizer,
    Tokenizer,
    load_stopwords,
    make_tokenizer,
)

__all__ = [
    "BM25ChunkIndex",
    "BM25Index",
    "BM25Params",
    "BM25Variant",
    "ChineseTokenizer",
    "EnglishTokenizer",
    "MixedTokenizer",
    "Tokenizer",
    "load_stopwords",
    "make_tokenizer",
]
