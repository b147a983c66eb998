"""Windowing a document around a chunk when it does not fit the model's window."""
from __future__ import annotations

import pytest

from ctxrag.indexing.contexts.windowing import CUT_MARKER, locate_chunk, window_document
from ctxrag.text import estimate_tokens


def _long_document(n: int = 2000) -> tuple[str, list[str]]:
    lines = [f"Line {i}: the quarterly figures of department {i % 17} were reviewed and filed." for i in range(n)]
    return "\n".join(lines), lines


def test_short_document_is_sent_whole() -> None:
    assert window_document("short doc with chunk", "chunk", 100) == ("short doc with chunk", False)


@pytest.mark.parametrize("where", [0, 1000, 1999])
def test_window_contains_chunk_fits_and_marks_cuts(where: int) -> None:
    document, lines = _long_document()
    chunk = "\n".join(lines[where : where + 3])
    text, cut = window_document(document, chunk, 500)
    assert cut
    assert chunk in text
    assert estimate_tokens(text) <= 500
    assert estimate_tokens(text) > 400  # uses the budget, not a sliver
    assert text.startswith(CUT_MARKER) == (where > 0)
    assert text.endswith(CUT_MARKER) == (where < 1997)


def test_window_is_centred_on_the_chunk() -> None:
    document, lines = _long_document()
    chunk = lines[1000]
    text, _ = window_document(document, chunk, 400)
    pos = text.index(chunk)
    assert abs(pos - (len(text) - pos - len(chunk))) < 0.2 * len(text)


def test_offset_wins_over_search_for_repeated_text() -> None:
    document = ("same sentence here. " * 500) + "unique tail " * 500
    chunk = "same sentence here. "
    late = 300 * len(chunk)
    text, _ = window_document(document, chunk, 200, offset=late)
    assert "unique" not in text and text.startswith(CUT_MARKER)
    early, _ = window_document(document, chunk, 200)  # search finds the first occurrence
    assert not early.startswith(CUT_MARKER)


def test_locate_chunk_fallbacks() -> None:
    doc = "abc def ghi jkl"
    assert locate_chunk(doc, "ghi", offset=8) == 8
    assert locate_chunk(doc, "ghi", offset=2) == 8  # wrong offset: search
    assert locate_chunk(doc, "\n def ghi \n") == 4  # stripped by the splitter: found by its stripped head
    assert locate_chunk(doc, "zzz", index=1, count=2) == len(doc) // 2  # proportional position
    assert locate_chunk(doc, "zzz", offset=4) == 4


def test_chunk_not_found_windows_by_position() -> None:
    document, _ = _long_document()
    text, cut = window_document(document, "text that was normalised away", 300, index=9, count=10)
    assert cut and "Line 1800:" in text and "Line 1000:" not in text
    assert estimate_tokens(text) <= 300


def test_chunk_larger_than_budget_keeps_its_start() -> None:
    document, lines = _long_document()
    chunk = "\n".join(lines[500:700])
    text, cut = window_document(document, chunk, 100)
    assert cut and estimate_tokens(text) <= 100
    assert lines[500][:40] in text


def test_custom_counter_and_bad_budget() -> None:
    document, lines = _long_document(300)
    words = lambda t: len(t.split())  # noqa: E731
    text, cut = window_document(document, lines[150], 120, count_tokens=words)
    assert cut and words(text) <= 120 and lines[150] in text
    with pytest.raises(ValueError, match="max_tokens must be > 0, got 0"):
        window_document(document, lines[0], 0)


def test_aligned_windows_are_shared_by_neighbouring_chunks_and_hold_each_chunk() -> None:
    document, lines = _long_document()
    windows = []
    for where in range(900, 1000, 4):  # 25 neighbouring chunks of 4 lines
        chunk = "\n".join(lines[where : where + 4])
        text, cut = window_document(document, chunk, 500, aligned=True)
        assert cut and chunk in text and estimate_tokens(text) <= 500
        windows.append(text)
    centred = {window_document(document, "\n".join(lines[w : w + 4]), 500)[0] for w in range(900, 1000, 4)}
    # a window of ~500 tokens holds ~25 lines and starts every ~12: 100 lines need 8-9 windows, not one per chunk
    assert len(set(windows)) <= 9 < len(centred) == 25
    last = "\n".join(lines[-3:])
    text, _ = window_document(document, last, 500, aligned=True)  # the grid's last window ends at the document's end
    assert text.endswith(last) and not text.endswith(CUT_MARKER)
