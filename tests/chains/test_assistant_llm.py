"""Each routing scenario end to end with the REAL local model (the default Qwen2.5-Coder-1.5B GGUF, served by the
run's llama_cpp.server: ``server_chat_model``, so its replies are recorded and replayed and these tests load no
model of their own; the in-process model has its own tests in tests/models) on small knowledge bases, and an article
from notes whose citations all point to real notes. Few calls, small max_tokens."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxrag.chains.article import ArticleWriter
from ctxrag.chains.assistant import Assistant
from ctxrag.chains.summarize import DocumentSummarizer
from ctxrag.kb.local import KnowledgeBase
from ctxrag.kb.notes import NoteBook
from ctxrag.settings import Settings

from assistant_helpers import doc_id

pytestmark = pytest.mark.llm


def _ask(kb, llm, question, selected=(), **kw):
    # small prompts and replies: each token costs time on two cores when a reply is not recorded yet
    bot = Assistant(kb, llm, max_tokens=40, rewrite=False, k=2, max_chars_per_chunk=500,
                    summarizer=DocumentSummarizer(kb, llm, window_chars=1500, max_tokens=48))
    return bot.invoke({"question": question, "selected_doc_ids": [doc_id(kb, s) for s in selected], **kw})


def test_1_1_unrelated_question_chats(sample_kb, server_chat_model) -> None:
    out = _ask(sample_kb, server_chat_model, "tell me a joke")
    assert out["route"] == "chat" and out["answer"].strip() and out["sources"] == []


def test_1_2_knowledge_question_uses_rag(sample_kb, server_chat_model) -> None:
    out = _ask(sample_kb, server_chat_model, "What port does the Xinghe server listen on by default?")
    assert out["route"] == "rag" and out["documents"] and out["answer"].strip()
    assert any("deployment_guide.md" in d.metadata["source"] for d in out["documents"])
    assert all(1 <= s["n"] <= len(out["documents"]) for s in out["sources"])


def test_1_2_off_topic_kb_says_no_material_without_sources(offtopic_kb, server_chat_model) -> None:
    out = _ask(offtopic_kb, server_chat_model, "星河知识库支持哪些文件格式？")
    assert out["route"] == "no_knowledge"
    assert out["answer"].startswith("知识库中没有关于") and out["sources"] == [] and out["documents"] == []
    assert not re.search(r"\[\d+\]", out["answer"])  # no invented citations
    general = _ask(offtopic_kb, server_chat_model, "What port does the Xinghe server listen on by default?",
                   allow_general_knowledge=True)
    assert general["route"] == "no_knowledge" and general["sources"] == []
    assert general["answer"].startswith("The knowledge base has no material on")
    assert len(general["answer"]) > len("The knowledge base has no material on") + 60  # the model added an answer


def test_2_1_selected_documents_unrelated_question_chats(sample_kb, server_chat_model) -> None:
    out = _ask(sample_kb, server_chat_model, "给我讲个笑话", ["xinghe_overview.md", "release_notes.txt"])
    assert out["route"] == "chat" and out["documents"] == [] and out["answer"].strip()


def test_2_2_focused_question_is_restricted_to_selection(sample_kb, server_chat_model) -> None:
    out = _ask(sample_kb, server_chat_model, "How do I change the server port?", ["deployment_guide.md"])
    assert out["route"] == "rag" and out["documents"]
    assert {d.metadata["doc_id"] for d in out["documents"]} == {doc_id(sample_kb, "deployment_guide.md")}


def test_2_3_divergent_question_summarises_selection(sample_kb, server_chat_model) -> None:
    sel = ["release_notes.txt", "faq.jsonl"]
    out = _ask(sample_kb, server_chat_model, "这几篇文章讲了什么？", sel)
    assert out["route"] == "summary"
    assert [d.metadata["doc_id"] for d in out["documents"]] == [doc_id(sample_kb, s) for s in sel]
    assert all(d.page_content.strip() for d in out["documents"]) and out["answer"].strip()
    assert all(s["doc_id"] in {doc_id(sample_kb, x) for x in sel} for s in out["sources"])


def test_article_from_notes_cites_only_real_notes(tmp_path: Path, shared_embeddings, server_chat_model) -> None:
    kb = KnowledgeBase.open("art", Settings(home=tmp_path / "home"), embeddings=shared_embeddings)
    book = NoteBook(kb)
    for title, text in [("Dense retrieval", "Dense retrieval embeds chunks and queries as vectors; cosine finds neighbours."),
                        ("BM25", "BM25 ranks chunks by exact keyword matches weighted by rarity."),
                        ("RRF fusion", "Reciprocal rank fusion merges the dense and BM25 lists by 1/(60+rank).")]:
        book.create(text, title=title, tags=["search"])
    notes = book.select(tag="search")
    out = ArticleWriter(server_chat_model, max_sections=2, section_tokens=60, outline_tokens=60).write(
        "Hybrid search", notes)
    md = out["article"]
    assert md.startswith("# Hybrid search") and "## References" in md
    body, refs = md.split("## References")
    cited = {int(n) for g in re.findall(r"\[(\d+(?:,\s*\d+)*)\]", body) for n in re.split(r",\s*", g)}
    assert cited and cited <= {1, 2, 3}
    assert set(out["citations"]) == cited
    for n, note_id in out["citations"].items():
        note = book.get(note_id)  # a real note
        assert f"[{n}] {note.title} ({note.source})" in refs
