"""The splitter's packing is linear: the same chunks as the former quadratic packer (kept here only as the reference)
on varied inputs, and the work per character stays flat when the input doubles (counted, not timed)."""
from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

import pytest

from ctxrag.loading import ChunkSplitter, approx_token_count
from ctxrag.loading.splitter import CHAR, SECTION, _Atom

SAMPLE_CORPUS = Path(__file__).resolve().parents[2] / "examples" / "sample_corpus"


class QuadraticReferenceSplitter(ChunkSplitter):
    """The packer and character cut as they were before they were made linear (verbatim), as the reference."""

    def _char_cut(self, start: int, end: int, first_level: int, section: int) -> list[_Atom]:
        atoms: list[_Atom] = []
        while start < end:
            lo, hi = start + 1, end
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if self._fits(start, mid) else (lo, mid - 1)
            atoms.append(_Atom(start, lo, first_level if not atoms else CHAR, section))
            start = lo
        return atoms

    def _pack(self, atoms: list[_Atom]) -> Iterable[tuple[int, int, int, int]]:
        n, i, min_break = len(atoms), 0, 1
        while i < n:
            hi = n
            if atoms[i].level != SECTION:
                hi = next((k for k in range(max(i + 1, min_break), n) if atoms[k].level == SECTION), n)
            j = max(self._last_fitting(atoms, i, hi, self.chunk_size), i) + 1
            b = j if j >= hi else self._choose_break(atoms, i, j, min_break)
            b = max(b, min(min_break, n))
            yield atoms[i].start, atoms[b - 1].end, i, b - 1
            if b >= n:
                return
            i, min_break = self._overlap_start(atoms, i, b), b + 1


_WORDS = ["星河", "知识库", "检索", "向量", "index", "retrieval", "chunk", "boundary", "supercalifragilistic", "a", "of"]
_ENDS = ["。", "！", "？", "；", ". ", "! ", ", ", "，", "、", ": ", " ", "\n", "\n\n", ""]


def _random_text(seed: int, n_pieces: int) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    for _ in range(n_pieces):
        r = rng.random()
        if r < 0.03:
            parts.append(f"\n{'#' * rng.randint(1, 4)} Heading {rng.randint(1, 99)}\n\n")
        elif r < 0.05:
            parts.append("x" * rng.randint(50, 900))  # a run with no break at all
        elif r < 0.07:
            parts.append("```\n# not a heading\ncode()\n```\n")
        else:
            parts.append(rng.choice(_WORDS) + rng.choice(_ENDS))
    return "".join(parts)


def _texts() -> list[str]:
    texts = [_random_text(seed, n) for seed, n in ((1, 50), (2, 400), (3, 1500), (4, 3000))]
    texts.append("星河" * 3000)  # one unbroken CJK run
    texts.append(("word " * 40 + ". ") * 60)  # one line, many sentences
    texts.extend(p.read_text(encoding="utf-8") for p in sorted(SAMPLE_CORPUS.glob("*.md")))
    return texts


@pytest.mark.parametrize(("size", "overlap", "unit"), [(60, 0, "chars"), (120, 30, "chars"), (400, 100, "chars"),
                                                       (80, 20, "tokens")])
def test_same_chunks_as_the_quadratic_reference(size: int, overlap: int, unit: str) -> None:
    new = ChunkSplitter(chunk_size=size, chunk_overlap=overlap, unit=unit)
    old = QuadraticReferenceSplitter(chunk_size=size, chunk_overlap=overlap, unit=unit)
    for text in _texts():
        for mode in ("text", "code"):
            assert new.split_text(text, mode=mode) == old.split_text(text, mode=mode), (mode, text[:80])


class _CountingList(list):
    reads = 0

    def __getitem__(self, key):  # noqa: ANN001, ANN204
        _CountingList.reads += 1
        return super().__getitem__(key)


def _work(cls: type[ChunkSplitter], text: str) -> tuple[int, int]:
    """(atom reads, characters measured) while splitting `text`: the splitter's work, independent of the clock."""
    measured = 0

    def length(s: str) -> int:
        nonlocal measured
        measured += len(s)
        return len(s)

    class Counting(cls):  # type: ignore[misc, valid-type]
        def _text_atoms(self):  # noqa: ANN202
            groups, paths = super()._text_atoms()
            return [_CountingList(g) for g in groups], paths

    _CountingList.reads = 0
    Counting(chunk_size=800, chunk_overlap=100, length_function=length).split_text(text)
    return _CountingList.reads, measured


def _growth(cls: type[ChunkSplitter], text: str) -> tuple[float, float]:
    small, large = _work(cls, text), _work(cls, text * 4)
    return large[0] / small[0], large[1] / small[1]


@pytest.mark.parametrize("unit_text", ["The depot opens at nine. ", "星河知识库支持私有化部署。", "x"])
def test_work_grows_linearly_with_a_single_line(unit_text: str) -> None:
    text = unit_text * (40_000 // len(unit_text))
    reads, measured = _growth(ChunkSplitter, text)
    assert reads < 4.6 and measured < 4.6, (reads, measured)  # 4x the text: about 4x the work
    # the reference shows what the bound catches: its atom scan (sentences) or its character cut (one long run)
    # grows with the square
    old_reads, old_measured = _growth(QuadraticReferenceSplitter, text)
    assert (old_measured if unit_text == "x" else old_reads) > 8, (old_reads, old_measured)
