"""The check report's lines: counts named by what they count."""
from __future__ import annotations

from ctxrag.stores.consistency import CheckReport, IndexDifference


def test_each_line_names_what_its_count_counts() -> None:
    report = CheckReport("kb", 3, 12, counts={"dense": 12, "documents": 2},
                         differences=[IndexDifference("dense"), IndexDifference("documents")])
    lines = report.lines()
    assert "  dense: 12 chunks, ok" in lines
    assert "  documents: 2 documents, ok" in lines
    assert report.clean
