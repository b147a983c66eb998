"""The typed store faces: every concrete index and lookup satisfies its protocol; a knowledge base's views follow new
generations; the chunk lookup resolves filters (cached per generation) and ids to documents. Real FAISS, BM25, SQLite."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from ctxrag.errors import ConfigError
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.bm25 import BM25ChunkIndex
from ctxrag.stores.documents.chunk_lookup import DocStoreChunkLookup
from ctxrag.stores.engine.current import CurrentDenseIndex, CurrentKeywordIndex
from ctxrag.stores.vectors.dense import FaissIndex
from ctxrag.stores.documents.docstore import DocStore
from ctxrag.stores.graph import GraphIndex
from ctxrag.stores.protocols import ChunkLookup, DenseIndex, DocumentLookup, GraphStore, KeywordIndex


@pytest.fixture
def kb(tmp_path: Path):  # noqa: ANN201
    kb = KnowledgeBase.open("p", Settings(home=tmp_path / "home"), embeddings=DeterministicFakeEmbedding(size=16))
    kb.add_texts([
        {"text": "Falcon pumps move water.", "source": "mem://falcon", "metadata": {"team": "a"}},
        {"text": "星河知识库支持 Markdown。", "source": "mem://xinghe", "metadata": {"team": "b"}},
    ])
    yield kb
    kb.close()


def test_concrete_indexes_satisfy_their_protocols(tmp_path: Path) -> None:
    emb = DeterministicFakeEmbedding(size=8)
    assert isinstance(FaissIndex(), DenseIndex)
    assert isinstance(BM25ChunkIndex(), KeywordIndex)
    assert isinstance(GraphIndex(emb, show_progress=False), GraphStore)
    store = DocStore(tmp_path / "s.sqlite")
    assert isinstance(store, DocumentLookup) and not isinstance(store, ChunkLookup)  # no filters on the raw store
    assert isinstance(DocStoreChunkLookup(store, lambda: 0), ChunkLookup)
    store.close()


def test_knowledge_base_pieces(kb: KnowledgeBase) -> None:
    assert isinstance(kb.dense_index(), DenseIndex) and isinstance(kb.keyword_index(), KeywordIndex)
    assert isinstance(kb.chunks, ChunkLookup) and isinstance(kb.documents, DocumentLookup)
    assert kb.graph_index() is None  # graph RAG is off by default
    assert len(kb.dense_index()) == len(kb.keyword_index()) == 2


def test_views_follow_new_generations(kb: KnowledgeBase) -> None:
    dense, bm25 = kb.dense_index(), kb.keyword_index()
    before = kb.generation
    kb.add_texts([{"text": "A third document about gaskets.", "source": "mem://gasket"}])
    assert kb.generation == before + 1
    assert len(dense) == len(bm25) == 3
    assert [c for c, _ in bm25.search("gaskets", 1)] == [f"{kb.get_document('mem://gasket').doc_id}:0"]
    qvec = np.asarray(kb.embeddings.embed_query("x"), dtype=np.float32)
    assert len(dense.search(qvec / np.linalg.norm(qvec), 5)) == 3


def test_view_without_the_index_names_the_knowledge_base() -> None:
    view = CurrentKeywordIndex(lambda: {}, owner="demo")
    with pytest.raises(RuntimeError, match="knowledge base 'demo' has no BM25 index"):
        view.search("q", 1)
    with pytest.raises(RuntimeError, match="has no dense index"):
        len(CurrentDenseIndex(lambda: {}, owner="demo"))


def test_chunk_lookup_filters_and_documents(kb: KnowledgeBase) -> None:
    lookup = kb.chunks
    falcon = kb.get_document("mem://falcon").doc_id
    assert lookup.allowed_chunk_ids(None) is None
    assert lookup.allowed_chunk_ids({"source": "mem://falcon"}) == {f"{falcon}:0"}
    assert lookup.allowed_chunk_ids({"source": ["mem://falcon", "mem://none"]}) == {f"{falcon}:0"}
    assert lookup.allowed_chunk_ids(lambda md: md["source"].endswith("xinghe")) != {f"{falcon}:0"}
    assert lookup.allowed_chunk_ids({"source": "mem://none"}) == set()
    with pytest.raises(ConfigError, match="filter must be a dict of metadata values or a predicate, got str"):
        lookup.allowed_chunk_ids("source=falcon")  # type: ignore[arg-type]
    docs = lookup.get_chunks(["missing", f"{falcon}:0"], {f"{falcon}:0": {"score": 0.5}})
    assert [d.id for d in docs] == [f"{falcon}:0"] and docs[0].metadata["score"] == 0.5
    assert docs[0].page_content == "Falcon pumps move water."


def test_filter_cache_is_per_generation(kb: KnowledgeBase) -> None:
    flt = {"file_type": "text"}
    first = kb.chunks.allowed_chunk_ids(flt)
    assert len(first) == 2 and kb.chunks.allowed_chunk_ids(flt) is first  # cached
    kb.add_texts([{"text": "Another text.", "source": "mem://third"}])
    assert len(kb.chunks.allowed_chunk_ids(flt)) == 3  # a new generation is not served from the old cache


def test_document_rows_and_summaries(kb: KnowledgeBase) -> None:
    rows = kb.documents.document_rows()
    assert [r.source for r in rows] == ["mem://falcon", "mem://xinghe"]
    doc_id = rows[0].doc_id
    assert kb.documents.get_summary(doc_id) == "" and kb.documents.get_summary("nope") is None
    kb.set_summaries({doc_id: "About pumps."})
    assert kb.documents.get_summary(doc_id) == "About pumps."
    assert kb.documents.document_rows()[0].summary == "About pumps."


def test_dense_view_writes_reach_the_current_index(tmp_path: Path) -> None:
    index = FaissIndex()
    view = CurrentDenseIndex(lambda: {"dense": index}, owner="demo")
    view.add([IndexedChunk("c1", "d", "t", "t", vector=np.ones(4, dtype=np.float32) / 2)])
    assert len(index) == 1 and "c1" in view
    assert view.vectors(["c1"]).shape == (1, 4)
    view.delete(["c1"])
    assert len(view) == 0
