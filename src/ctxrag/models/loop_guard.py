"""Degenerate-loop detection for generated text: a tail that repeats one unit, or an endless run of `[n]` citations.

Small local models sometimes fall into a loop such as ``[2] [2][3] [2][3] [2][3] ...`` or the same sentence again and
again until ``max_tokens``. `find_loop` finds such a tail, `trim_loop` cuts it back to its first copy, and
`StreamingLoopGuard` does both while text streams in: it holds back only the part that already looks like a repeat, so
what a reader sees streamed equals what ``invoke`` returns, and it says when to stop generating.

Example::

    from ctxrag.models.loop_guard import StreamingLoopGuard, trim_loop
    trim_loop("It has 200 GB [2]. [2][3] [2][3] [2][3] [2][3] [2][3]")   # ('It has 200 GB [2]. [2][3]', True)
    guard = StreamingLoopGuard()
    shown = "".join(guard.feed(d) for d in ["Yes [1]. ", *["[1] "] * 10]) + guard.flush()
    guard.stopped, shown                                                   # (True, 'Yes [1]. [1]')
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_MARKER = r"\[\d{1,3}(?:\s*[,，、]\s*\d{1,3})*\]"
# a trailing run of markers, possibly ending in a marker still being written ("[2][3] [2")
_CITATION_RUN = re.compile(rf"(?:{_MARKER}[\s,，、.。;；]*)*(?:\[[\d\s,，、]*)?$")
_MARKER_RE = re.compile(_MARKER)
_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class LoopLimits:
    """When a repeating tail counts as a loop.

    A unit of ``p`` characters (``p <= max_period``, with a letter, digit or CJK character) repeated so that the repeating tail holds at
    least ``min_repeats`` copies and ``min_chars`` characters; a unit of ``long_unit`` characters or more already after
    two copies (an exact repeat of a whole sentence is never wanted); or ``max_citations`` `[n]` markers in a row.
    """

    min_repeats: int = 3
    min_chars: int = 24
    long_unit: int = 40
    max_period: int = 200
    max_citations: int = 8
    window: int = 4000
    """Only the last ``window`` characters are examined (bounds the cost per streamed token)."""

    def __post_init__(self) -> None:
        for name in ("min_repeats", "min_chars", "long_unit", "max_period", "max_citations", "window"):
            if getattr(self, name) < 2:
                raise ValueError(f"LoopLimits.{name}={getattr(self, name)!r} must be >= 2")


DEFAULT_LIMITS = LoopLimits()


@dataclass(frozen=True)
class Loop:
    """A detected loop: ``text[:cut]`` is what to keep; ``period`` the unit's length (0 for a run of `[n]` markers),
    ``repeats`` how many copies (markers) were seen."""

    cut: int
    period: int
    repeats: float

    def apply(self, text: str) -> str:
        return text[: self.cut]


def _periodic_tail(text: str, p: int) -> int:
    """Length L of the longest suffix with text[i] == text[i - p] throughout (the part after the first copy)."""
    n = len(text)
    length = 0
    while length < n - p and text[n - 1 - length] == text[n - 1 - length - p]:
        length += 1
    return length


def _repeats(text: str, limits: LoopLimits) -> list[tuple[int, int]]:
    """(period, L) for every period with a repeating tail (L >= 1) whose unit is not only white space, shortest first."""
    n = len(text)
    found = []
    for p in range(1, min(limits.max_period, n // 2) + 1):
        length = _periodic_tail(text, p)
        if length and text[n - p - length : n - length].strip():
            found.append((p, length))
    return found


def _citation_run(text: str) -> tuple[int, list[re.Match[str]]]:
    """Start of the trailing run of `[n]` markers (len(text) when none) and its complete markers."""
    m = _CITATION_RUN.search(text)
    if not m or m.start() == len(text):
        return len(text), []
    return m.start(), list(_MARKER_RE.finditer(text, m.start()))


def _end_of_new_markers(markers: list[re.Match[str]]) -> int:
    """End of the last marker in the run that cites a number not cited earlier in the run."""
    seen: set[str] = set()
    end = markers[0].end()
    for m in markers:
        key = re.sub(r"\s+", "", m.group(0))
        if key not in seen:
            seen.add(key)
            end = m.end()
    return end


def find_loop(text: str, limits: LoopLimits = DEFAULT_LIMITS) -> Loop | None:
    """The loop at the end of ``text``, or None. Cheap enough to call after every streamed token."""
    offset = max(0, len(text) - limits.window)
    tail = text[offset:]
    start, markers = _citation_run(tail)
    if len(markers) >= limits.max_citations:
        return Loop(cut=offset + _end_of_new_markers(markers), period=0, repeats=float(len(markers)))
    for p, length in _repeats(tail, limits):
        copies = (length + p) / p
        unit = tail[len(tail) - length - p : len(tail) - length]
        if not _WORD.search(unit):  # rules such as |---|---|--- or ===== are layout, not a loop
            continue
        if (copies >= limits.min_repeats and length + p >= limits.min_chars) or (p >= limits.long_unit and length >= p):
            return Loop(cut=offset + len(tail) - length, period=p, repeats=copies)
    return None


def trim_loop(text: str, limits: LoopLimits = DEFAULT_LIMITS) -> tuple[str, bool]:
    """``text`` with a looping tail cut back to its first copy; True when something was cut."""
    loop = find_loop(text, limits)
    return (text, False) if loop is None else (loop.apply(text), True)


class StreamingLoopGuard:
    """Feed streamed deltas; get back the text that is safe to show; ``stopped`` turns True at a loop.

    Text that already looks like the start of a repeat (a tail copying the characters just before it, or a run of
    `[n]` markers) is held back until it either turns into a loop (then it is dropped and generation should stop) or
    stops repeating (then it is released). ``flush()`` releases what is held when the stream ends normally.
    """

    def __init__(self, limits: LoopLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.text = ""
        self.emitted = 0
        self.stopped = False
        self.loop: Loop | None = None

    def _held_from(self) -> int:
        offset = max(0, len(self.text) - self.limits.window)
        tail = self.text[offset:]
        start, markers = _citation_run(tail)
        held = offset + start
        for _, length in _repeats(tail, self.limits):
            held = min(held, len(self.text) - length)
        return held

    def feed(self, delta: str) -> str:
        """Add a delta; return the newly showable text ("" while holding back or after a stop)."""
        if self.stopped or not delta:
            return ""
        self.text += delta
        loop = find_loop(self.text, self.limits)
        if loop is not None:
            self.stopped, self.loop = True, loop
            final = loop.apply(self.text)
            out = final[self.emitted :] if len(final) > self.emitted else ""
            self.text = self.text[: self.emitted] + out
            self.emitted = len(self.text)
            return out
        safe = max(self.emitted, self._held_from())
        out = self.text[self.emitted : safe]
        self.emitted = safe
        return out

    def flush(self) -> str:
        """Release what is still held (the stream ended without a loop)."""
        out = self.text[self.emitted :]
        self.emitted = len(self.text)
        return out

    @property
    def final_text(self) -> str:
        """Everything shown so far plus what is held: the answer ``invoke`` returns."""
        return self.text
