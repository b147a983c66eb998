"""NoteBook over a real knowledge base: create, from_answer (citations kept), edit, tag, delete, list, search,
select; notes are chunks with collection/tags metadata so they are retrievable and filterable."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrag.errors import ConfigError, DocumentNotFound
from ctxrag.kb.local import KnowledgeBase
from ctxrag.kb.notes import NoteBook, note_id_of
from ctxrag.settings import Settings


@pytest.fixture
def kb(tmp_path: Path, shared_embeddings) -> KnowledgeBase:
    kb = KnowledgeBase.open("notes", Settings(home=tmp_path / "home"), embeddings=shared_embeddings)
    doc = tmp_path / "doc.md"
    doc.write_text("# Pumps\n\nThe Falcon-7 pump moves 40 litres per minute.\n", encoding="utf-8")
    kb.ingest([doc], progress=False)
    return kb


def test_create_list_search_and_chunk_metadata(kb: KnowledgeBase) -> None:
    book = NoteBook(kb)
    a = book.create("混合检索用倒数排名融合（RRF）合并向量检索和 BM25 的结果。", title="混合检索", tags=["retrieval"])
    b = book.create("Sourdough starter needs daily feeding with flour and water.", tags=["baking"])
    assert (a.id, b.id) == (1, 2) and b.title.startswith("Sourdough starter")
    assert [n.id for n in book.list()] == [1, 2] and [n.id for n in book.list(tag="baking")] == [2]
    chunks = [c for c in kb.chunks.all_chunks() if c.metadata["source"] == "note://1"]
    assert chunks and chunks[0].metadata["collection"] == "notes" and chunks[0].metadata["tags"] == ["retrieval"]
    assert chunks[0].metadata["note_id"] == 1
    hits = book.search("RRF 是怎么合并结果的？", k=2)
    assert hits[0][0].id == 1
    assert all(n.source.startswith("note://") for n, _ in hits)  # the ordinary document is never a note hit
    assert [n.id for n, _ in book.search("feeding flour", tag="baking")] == [2]
    assert book.search("feeding flour", tag="retrieval")[0][0].id == 1  # only notes with that tag
    # notes are retrievable like documents
    assert kb.search("Sourdough starter feeding", k=1)[0].metadata["source"] == "note://2"


def test_from_answer_keeps_citations(kb: KnowledgeBase) -> None:
    answer = {"question": "How fast is the Falcon-7?", "answer": "It moves 40 litres per minute [1].",
              "sources": [{"n": 1, "source": "/x/doc.md", "title": "Pumps", "chunk_id": "abc:0",
                           "text": "The Falcon-7 pump moves 40 litres per minute."}]}
    note = NoteBook(kb).from_answer(answer, tags=["faq"])
    assert note.title == "How fast is the Falcon-7?"
    assert note.citations == [{"n": 1, "source": "/x/doc.md", "title": "Pumps", "chunk_id": "abc:0",
                               "excerpt": "The Falcon-7 pump moves 40 litres per minute."}]
    again = NoteBook(kb).get(note.id)  # read back from SQLite
    assert again.citations == note.citations and again.tags == ["faq"]
    assert "Sources:\n[1] Pumps (/x/doc.md)" in kb.get_document("note://1").text
    with pytest.raises(ConfigError, match="non-empty 'answer'"):
        NoteBook(kb).from_answer({"answer": ""})


def test_edit_tag_delete(kb: KnowledgeBase) -> None:
    book = NoteBook(kb)
    n = book.create("first text", tags=["a"])
    book.edit(n.id, text="Falcon pumps are loud", title="Pumps note")
    assert book.get(n.id).title == "Pumps note" and "loud" in kb.get_document(n.source).text
    book.tag(n.id, add=["b", "c"], remove=["a"])
    assert book.get(n.id).tags == ["b", "c"]
    assert {c.metadata["source"]: c.metadata.get("tags") for c in kb.chunks.all_chunks()}[n.source] == ["b", "c"]
    book.delete(n.id)
    assert book.list() == [] and all(c.metadata["source"] != n.source for c in kb.chunks.all_chunks())
    with pytest.raises(DocumentNotFound, match="no note 1"):
        book.get(n.id)


def test_errors_and_select(kb: KnowledgeBase) -> None:
    book = NoteBook(kb)
    with pytest.raises(ConfigError, match="non-empty text"):
        book.create("   ")
    with pytest.raises(ConfigError, match="invalid tag 'a b'"):
        book.create("x", tags=["a b"])
    assert len(book) == 0  # the failed create left nothing behind
    a = book.create("alpha note about pumps", tags=["t"])
    b = book.create("beta note about bread", tags=["t"])
    assert [n.id for n in book.select(ids=[b.id, a.id])] == [b.id, a.id]
    assert [n.id for n in book.select(tag="t")] == [a.id, b.id]
    assert book.select(query="bread", k=1)[0].id == b.id
    with pytest.raises(ConfigError, match="choose notes"):
        book.select()
    assert note_id_of("note://12") == 12 and note_id_of("/x/note.md") is None
