"""How `ctxrag ask` lists an answer's sources after the citation check: the heading says whether the model cited
nothing or cited the wrong chunk, and a model's marker the check dropped is named, so every [n] in the answer text is
accounted for."""
from __future__ import annotations

from langchain_core.documents import Document

from ctxrag.chains.citations import map_citations
from ctxrag.cli.query import print_sources

DOCS = [Document("Pricing: the Team plan costs 30 yuan per seat.", metadata={"source": "pricing.md", "chunk_id": "p:0"}),
        Document("P1 incidents on the Enterprise plan get a response within 30 minutes.",
                 metadata={"source": "support_policy.html", "chunk_id": "s:0"})]


def _printed(answer: str, capsys) -> str:  # noqa: ANN001
    out = map_citations(answer, DOCS)
    print_sources(out["sources"], out["invalid_citations"], out["citations"])
    return capsys.readouterr().out


def test_a_wrong_citation_is_reported_as_corrected_and_the_dropped_marker_named(capsys) -> None:  # noqa: ANN001
    text = _printed("P1 incidents on the Enterprise plan get a response within 30 minutes [1].", capsys)
    assert "corrected by the citation check" in text and "the model cited none" not in text
    assert "[2] support_policy.html" in text
    assert "the model's [1] dropped by the check" in text


def test_no_citation_at_all_says_the_model_cited_none(capsys) -> None:  # noqa: ANN001
    text = _printed("P1 incidents on the Enterprise plan get a response within 30 minutes.", capsys)
    assert "the model cited none" in text and "dropped" not in text


def test_a_right_citation_is_listed_plainly(capsys) -> None:  # noqa: ANN001
    text = _printed("P1 incidents on the Enterprise plan get a response within 30 minutes [2].", capsys)
    assert "\nSources:\n" in text and "dropped" not in text and "corrected" not in text
