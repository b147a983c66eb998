"""`[n]` and by-name citations mapped to the numbered sources (`ctxrag.chains.citations`)."""
from __future__ import annotations

from langchain_core.documents import Document

from ctxrag.chains.citations import map_citations, named_citations

GUIDE = "examples/deployment_guide.md"
DOCS = [
    Document("Install with pip. Then run the server.", metadata={"source": GUIDE, "title": "Deployment Guide"}),
    Document("The server listens on port 7420 by default.", metadata={"source": GUIDE, "title": "Deployment Guide"}),
    Document("星河知识库支持 PDF、Word 和 Markdown。", metadata={"source": "docs/overview.md", "title": "星河知识库产品概览"}),
    Document("Extra storage costs 30 yuan.", metadata={"source": "src/quota_calculator.py"}),
]


def test_a_source_cited_by_its_title_counts_as_cited() -> None:
    # the demo's port answer: "... provided in the [Xinghe Knowledge Base: Deployment Guide] source"
    out = map_citations("The server listens on port 7420 by default, as the [Deployment Guide] says.", DOCS)
    assert [(s["n"], s.get("inferred", False)) for s in out["sources"]] == [(2, False)]  # the chunk holding 7420


def test_names_match_titles_file_names_and_stems_in_either_bracket() -> None:
    assert named_citations("支持 PDF、Word 和 Markdown【星河知识库产品概览】。", DOCS) == [3]
    assert named_citations("It costs 30 yuan [quota_calculator.py].", DOCS) == [4]
    assert named_citations("It costs 30 yuan [Quota calculator].", DOCS) == [4]
    assert named_citations("Listens on 7420 [Xinghe Knowledge Base: Deployment Guide].", DOCS) == [2]


def test_numbers_links_and_unknown_names_are_not_named_citations() -> None:
    assert named_citations("Port 7420 [2], see [the docs](https://x.org/deployment_guide) and [Support Policy].",
                           DOCS) == []
    assert named_citations("A [note] on storage.", DOCS) == []
    out = map_citations("Port 7420 [2] [Deployment Guide].", DOCS)  # a number and a name for one source: once
    assert [s["n"] for s in out["sources"]] == [2]
