"""Locating a short answer phrase in the retrieved chunks (the short answer style's citation)."""
from langchain_core.documents import Document

from ctxrag.chains.citations import locate


def test_locate_finds_the_first_chunk_holding_the_phrase() -> None:
    docs = [Document("The pump moves 40 L/min."), Document("Port 9321 is the default."), Document("9321 again")]
    assert locate("9321", docs) == 2
    assert locate("「9321」。", docs) == 2  # quotes and end punctuation around the phrase are ignored
    assert locate("the  PUMP moves", docs) == 1  # whitespace and case too
    assert locate("8080", docs) is None
    assert locate("[2]", docs) is None and locate("  ", docs) is None  # nothing left to look for
