"""Cut a document too long for the model's window down to a window centred on one chunk, marked with "[...]".

Example::

    from ctxrag.indexing.contexts.windowing import window_document
    doc = "intro " * 5000 + "THE CHUNK" + " outro" * 5000
    text, cut = window_document(doc, "THE CHUNK", max_tokens=500)
    assert cut and "THE CHUNK" in text and text.startswith("[...]")
"""
from __future__ import annotations

from collections.abc import Callable

from ctxrag.text import estimate_tokens

CUT_MARKER = "[...]"
_SNAP_CHARS = 120  # how far a cut end may move to land on a line break or space


def locate_chunk(document: str, chunk: str, *, offset: int | None = None, index: int = 0, count: int = 1) -> int:
    """Start offset of `chunk` in `document`: the given `offset` when it matches, else a string search (whole chunk,
    then its stripped first 200 characters), else the chunk's proportional position `index / count`."""
    if offset is not None and 0 <= offset <= len(document) and document.startswith(chunk, offset):
        return offset
    found = document.find(chunk)
    if found < 0:
        head = chunk.strip()[:200]
        found = document.find(head) if head else -1
    if found >= 0:
        return found
    if offset is not None and 0 <= offset <= len(document):
        return offset
    return int(len(document) * index / max(count, 1))


def _snap_left(document: str, left: int, limit: int) -> int:
    """Move a left cut forward to just after a line break (or space) so the window starts on a whole line."""
    if left <= 0:
        return 0
    stop = min(limit, left + _SNAP_CHARS)
    for sep in ("\n", " "):
        pos = document.find(sep, left, stop)
        if pos >= 0:
            return pos + 1
    return left


def _snap_right(document: str, right: int, limit: int) -> int:
    """Move a right cut back to a line break (or space), never before `limit` (the chunk's end)."""
    if right >= len(document):
        return len(document)
    start = max(limit, right - _SNAP_CHARS)
    for sep in ("\n", " "):
        pos = document.rfind(sep, start, right)
        if pos >= 0:
            return pos
    return right


def _grid_window(document: str, start: int, end: int, budget: int) -> tuple[int, int] | None:
    """The window of the fixed grid (windows of `budget` characters every `budget // 2`) whose cell holds the chunk's
    start, when it holds the whole chunk; its ends snapped to line breaks independently of the chunk."""
    stride = max(1, budget // 2)
    right = min(len(document), (start // stride) * stride + budget)
    left = max(0, right - budget)
    left, right = _snap_left(document, left, left + _SNAP_CHARS), _snap_right(document, right, right - _SNAP_CHARS)
    return (left, right) if left <= start and end <= right else None


def window_document(
    document: str,
    chunk: str,
    max_tokens: int,
    *,
    offset: int | None = None,
    index: int = 0,
    count: int = 1,
    count_tokens: Callable[[str], int] = estimate_tokens,
    document_tokens: int | None = None,
    aligned: bool = False,
) -> tuple[str, bool]:
    """`(text, was_cut)`: the whole document when it fits in `max_tokens`, else a window around the chunk.

    The window is centred on the chunk (found by `offset`, else by search, see `locate_chunk`), keeps the chunk whole
    when it fits, and carries "[...]" at each cut end. It always fits `max_tokens` by `count_tokens`.

    With ``aligned``, windows lie on a fixed grid (one every half window) and a chunk gets the grid window holding
    it, so neighbouring chunks get the very same text and a model that reuses an evaluated prefix (llama.cpp,
    servers with prompt caching) reads it once per window instead of once per chunk; a chunk no grid window holds
    whole gets a centred one. Pass the same `max_tokens` for every chunk of a document to share windows.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
    total = count_tokens(document) if document_tokens is None else document_tokens
    if total <= max_tokens:
        return document, False
    start = locate_chunk(document, chunk, offset=offset, index=index, count=count)
    end = min(len(document), start + len(chunk))
    chars_per_token = len(document) / max(total, 1)
    budget = max(1, int(max_tokens * chars_per_token))
    while True:
        extra = budget - (end - start)
        placed = _grid_window(document, start, end, budget) if aligned and extra >= 0 else None
        if placed is not None:
            left, right = placed
        elif extra >= 0:
            left = max(0, start - extra // 2)
            right = min(len(document), left + budget)
            left = max(0, right - budget)
            left, right = _snap_left(document, left, start), _snap_right(document, right, end)
        else:  # the chunk alone is over budget: keep its beginning
            left, right = start, start + budget
        text = document[left:right]
        if left > 0:
            text = f"{CUT_MARKER}\n{text}"
        if right < len(document):
            text = f"{text}\n{CUT_MARKER}"
        if count_tokens(text) <= max_tokens or budget <= 1:
            return text, True
        budget = max(1, int(budget * 0.9))


BEGINNING_CHARS = 200
"""How much of a document's beginning `window_beginning` keeps whole."""


def window_beginning(
    document: str, max_tokens: int, *, count_tokens: Callable[[str], int] = estimate_tokens,
) -> tuple[str, bool]:
    """`(text, was_cut)`: the whole document when it fits in `max_tokens`, else a window from its start (its first
    `BEGINNING_CHARS` characters kept whole, "[...]" at the cut end): what a whole-document context reads."""
    return window_document(document, document[:BEGINNING_CHARS], max_tokens, offset=0, count_tokens=count_tokens)
