"""BM25Retriever as a LangChain retriever, and BM25ChunkIndex as a ChunkIndex."""
from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document

from ctxrag.errors import IndexCorruptError
from ctxrag.retrievers.bm25 import BM25Retriever
from ctxrag.stores.bm25 import BM25ChunkIndex, BM25Index
from ctxrag.stores.base import ChunkIndex, IndexedChunk

DOCS = [
    Document("检索增强生成把检索结果放进提示词", id="rag", metadata={"source": "a.md"}),
    Document("BM25 is a lexical ranking function", id="bm25", metadata={"source": "b.md"}),
    Document("Dense retrieval uses embeddings", metadata={"chunk_id": "dense"}),
    Document("jieba 中文分词 and English tokens", id="mixed"),
]


def test_retriever_returns_documents_with_scores():
    retriever = BM25Retriever.from_documents(DOCS, k=2, fill=False)
    docs = retriever.invoke("lexical ranking")
    assert [d.id for d in docs] == ["bm25"]
    assert docs[0].metadata["source"] == "b.md"
    assert docs[0].metadata["bm25_score"] == docs[0].metadata["score"] > 0
    assert [d.id for d in retriever.invoke("检索")] == ["rag"]
    assert [d.id for d in retriever.invoke("retrieval embeddings")] == ["dense"]


def test_retriever_fills_to_k_like_langchain():
    """LangChain's BM25Retriever always returns k documents; so does ours by default (zero scores, index order)."""
    docs = BM25Retriever.from_documents(DOCS, k=3).invoke("lexical ranking")
    assert [d.id for d in docs] == ["bm25", "rag", "dense"]
    assert [d.metadata["score"] for d in docs[1:]] == [0.0, 0.0]
    assert [d.id for d in BM25Retriever.from_documents(DOCS, k=2).invoke("")] == ["rag", "bm25"]
    only = BM25Retriever.from_documents(DOCS, k=3, filter={"source": ["a.md", "b.md"]}).invoke("lexical")
    assert [d.id for d in only] == ["bm25", "rag"]  # the fill respects the filter


def test_retriever_empty_query_and_runtime_options():
    retriever = BM25Retriever.from_documents(DOCS, fill=False)
    assert retriever.invoke("") == []
    assert retriever.invoke("the of") == []
    assert [d.id for d in retriever.invoke("中文 检索 English", allowed_ids={"mixed"})] == ["mixed"]
    assert len(retriever.invoke("中文 检索 English lexical", k=1)) == 1


def test_retriever_async_and_batch():
    retriever = BM25Retriever.from_documents(DOCS, fill=False)
    assert [d.id for d in asyncio.run(retriever.ainvoke("embeddings"))] == ["dense"]
    assert [[d.id for d in r] for r in retriever.batch(["embeddings", "lexical"])] == [["dense"], ["bm25"]]


def test_retriever_add_delete_and_lookup():
    retriever = BM25Retriever.from_documents(DOCS, fill=False)
    retriever.delete(["bm25"])
    assert retriever.invoke("lexical") == []
    retriever.add_documents([Document("lexical search again", id="new")])
    assert [d.id for d in retriever.invoke("lexical")] == ["new"]
    store = {d.id or d.metadata["chunk_id"]: d for d in DOCS}
    index = BM25Index()
    index.add([d.page_content for d in DOCS], ids=list(store))
    looked_up = BM25Retriever(index=index, lookup=lambda ids: [store[i] for i in ids if i != "rag"], fill=False)
    assert [d.id for d in looked_up.invoke("lexical ranking")] == ["bm25"]
    assert looked_up.invoke("检索增强") == []  # the store no longer has it: skipped, not an error


def _chunk(chunk_id, text):
    return IndexedChunk(chunk_id=chunk_id, doc_id=chunk_id.split(":")[0], text=text, content=text)


def test_chunk_index_contract(tmp_path):
    index = BM25ChunkIndex()
    assert isinstance(index, ChunkIndex) and index.name == "bm25"
    index.add([_chunk("d1:0", "向量数据库 FAISS"), _chunk("d1:1", "关键词检索 BM25"), _chunk("d2:0", "BM25 ranking")])
    assert len(index) == 3
    assert {c for c, _ in index.search("BM25", k=5)} == {"d2:0", "d1:1"}
    assert [c for c, _ in index.search("BM25", k=5, allowed_chunk_ids={"d1:1"})] == ["d1:1"]
    index.add([_chunk("d1:0", "BM25 replaced")])
    assert len(index) == 3 and index.search("FAISS", k=5) == []
    index.delete(["d2:0", "unknown"])
    assert len(index) == 2 and "d2:0" not in index
    index.save(tmp_path / "bm25")
    loaded = BM25ChunkIndex.load(tmp_path / "bm25")
    assert loaded.search("BM25", k=5) == index.search("BM25", k=5)
    (tmp_path / "bm25" / "bm25.json").write_text("{")
    with pytest.raises(IndexCorruptError):
        BM25ChunkIndex.load(tmp_path / "bm25")
