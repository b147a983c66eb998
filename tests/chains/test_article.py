"""Article from notes with a scripted model: outline parsing and fallback, citation remapping, invalid citations
dropped, every citation in the article pointing to a real note, streaming order."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxrag.chains.article import ArticleWriter, remap_citations
from ctxrag.kb.local import KnowledgeBase
from ctxrag.kb.notes import NoteBook
from ctxrag.settings import Settings

from assistant_helpers import ScriptedChat


@pytest.fixture
def book(tmp_path: Path, shared_embeddings) -> NoteBook:
    kb = KnowledgeBase.open("art", Settings(home=tmp_path / "home"), embeddings=shared_embeddings)
    b = NoteBook(kb)
    b.create("Dense retrieval embeds chunks and queries.", title="Dense", tags=["r"])
    b.create("BM25 scores exact keyword matches.", title="BM25", tags=["r"])
    b.create("RRF merges ranked lists by reciprocal rank.", title="RRF", tags=["r"])
    return b


def test_remap_citations() -> None:
    text, dropped = remap_citations("a [1] b [2, 3] c [9] d [1，2]", {1: 4, 2: 6})
    assert text == "a [4] b [6] c  d [4][6]" and dropped == [3, 9]


def _article_citations(md: str) -> set[int]:
    body = md.split("## References")[0]
    return {int(n) for g in re.findall(r"\[(\d+(?:,\s*\d+)*)\]", body) for n in re.split(r",\s*", g)}


def test_article_citations_all_point_to_real_notes(book: NoteBook) -> None:
    notes = book.select(tag="r")
    llm = ScriptedChat.of(
        '[{"title": "Two retrievers", "notes": [1, 2]}, {"title": "Fusion", "notes": [3, 7]}]',
        "Dense search embeds text [1] while BM25 matches keywords [2]. Also [5].",  # [5] is not a note of this section
        "RRF merges the lists [1].",  # local [1] = global note 3
    )
    chunks = list(ArticleWriter(llm).stream("Hybrid search", notes))
    assert list(chunks[0]) == ["outline"] and chunks[0]["outline"][1] == {"title": "Fusion", "notes": [3]}
    assert [c["section"] for c in chunks if "section" in c] == ["Two retrievers", "Fusion"]
    final = chunks[-1]
    md = final["article"]
    assert md.startswith("# Hybrid search\n") and "## Fusion\n\nRRF merges the lists [3]." in md
    cited = _article_citations(md)
    assert cited == {1, 2, 3} and final["citations"] == {1: notes[0].id, 2: notes[1].id, 3: notes[2].id}
    for n, note_id in final["citations"].items():
        assert book.get(note_id).title in md.split("## References")[1]
    assert final["invalid_citations"] == [{"section": "Two retrievers", "numbers": [5]}]
    # section prompts number notes locally: the Fusion section sees only RRF as [1]
    assert "[1] RRF" in llm.prompts[2][1].content and "BM25" not in llm.prompts[2][1].content


def test_bad_outline_falls_back_and_uncited_sections_credit_their_notes(book: NoteBook) -> None:
    notes = book.select(tag="r")
    llm = ScriptedChat.of("Here is an outline: intro, body", "Some text.", "More text.")
    out = ArticleWriter(llm, max_sections=2).write("Notes", notes)
    assert out["outline"] == [{"title": "Dense", "notes": [1, 2]}, {"title": "RRF", "notes": [3]}]
    assert "Some text. [1][2]" in out["article"] and _article_citations(out["article"]) == {1, 2, 3}


def test_errors(book: NoteBook) -> None:
    with pytest.raises(ValueError, match="at least one note"):
        ArticleWriter(ScriptedChat.of()).write("t", [])
    with pytest.raises(ValueError, match="max_sections"):
        ArticleWriter(ScriptedChat.of(), max_sections=0)
