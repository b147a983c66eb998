"""Split Chinese/English text into chunks that respect headings, paragraphs and sentences.

The text is first cut into Markdown sections (``#`` .. ``######``, outside code fences), each tagged with its
heading path. Sections are decomposed into *atoms*: paragraphs, then sentences (Chinese ``。！？；…``, English
``. ! ?`` before whitespace), then lines; an atom still larger than ``chunk_size`` is cut at clause punctuation
(``，、：,;:``), then at spaces, then at characters. Every atom remembers how strong the boundary before it is.
Atoms are packed greedily up to ``chunk_size``; when the next atom does not fit, the chunk ends at the strongest
boundary that still leaves it at least half full (a section start always qualifies). The next chunk repeats
whole trailing sentences of the previous one, up to ``chunk_overlap``, but never across a section start.
Chunks never span two top-level sections (the shallowest heading level in the document).

Every chunk satisfies ``text[chunk.start_index:chunk.end_index] == chunk.text`` (leading/trailing whitespace
trimmed off the span, never out of the text).
"""
from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import BaseDocumentTransformer, Document

from ctxrag.enums import ChoiceEnum
from ctxrag.errors import ConfigError

# Boundary strength before an atom: lower is stronger.
SECTION, PARAGRAPH, SENTENCE, LINE, CLAUSE, WORD, CHAR = range(7)
# a chunk may end early at a section start; at any other boundary only once it is at least this full
_HALF_FULL = 0.5
_CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_PATTERNS = {
    PARAGRAPH: re.compile(r"\n[ \t\r]*\n\s*"),
    SENTENCE: re.compile(r"(?:[。！？；…]+|[.!?]+(?=[”’\"')\]]*\s))[”’\"'」』）》)\]]*\s*"),
    LINE: re.compile(r"\n"),
    CLAUSE: re.compile(r"(?:[，、：]|[,;:](?=\s))\s*"),
    WORD: re.compile(r"\s+"),
}
_HEADING = re.compile(r"^(#{1,6})[ \t]+(\S.*)$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_CODE_DEF = re.compile(
    r"^(?:export\s+)?(?:default\s+)?(?:pub(?:\([^)]*\))?\s+)?"
    r"(?:(?:public|private|protected|internal|static|abstract|final|async|inline|open|override|sealed|data)\s+)*"
    r"(def|class|function|func|fn|interface|struct|enum|impl|trait|object|module)\b[\s*]*([A-Za-z_$][\w$]*)?"
)
_CODE_PREAMBLE = re.compile(r"^(?:@|#|//|/\*|\*|--)")
_TOKEN_PIECE = re.compile(rf"[{_CJK_CLASS}]|[^\W_{_CJK_CLASS}]+|\S")
_LONG_WORD = re.compile(rf"[^\W_{_CJK_CLASS}]{{7,}}")


def approx_token_count(text: str) -> int:
    """Cheap tokenizer-free token estimate: each CJK character (Hanzi, kana, Hangul) counts 1, each run of
    letters/digits counts one per started 6 characters, each other non-space character (punctuation) counts 1.

    >>> approx_token_count("星河知识库 supports retrieval!")
    10
    """
    count = len(_TOKEN_PIECE.findall(text))
    for word in _LONG_WORD.findall(text):
        count += (len(word) - 1) // 6
    return count


class SplitUnit(ChoiceEnum):
    """What ``chunk_size`` counts: characters, or tokens via ``length_function``."""

    __label__ = "split unit"
    __field__ = "unit"
    __error__ = ConfigError

    CHARS = "chars"
    TOKENS = "tokens"


class SplitMode(ChoiceEnum):
    """``text`` (headings, paragraphs, sentences), ``code`` (definitions, blank lines, lines), or ``auto``
    (code when a document's metadata says ``file_type == "code"``, text otherwise)."""

    __label__ = "split mode"
    __field__ = "mode"
    __error__ = ConfigError

    TEXT = "text"
    CODE = "code"
    AUTO = "auto"


@dataclass(frozen=True)
class Chunk:
    """One chunk: ``text == document_text[start_index:end_index]``; ``heading_path`` like ``"Intro > Setup"``."""

    text: str
    index: int
    start_index: int
    end_index: int
    heading_path: str = ""


@dataclass
class _Atom:
    start: int
    end: int
    level: int
    section: int
    heading: bool = False  # a heading line: never end a chunk right after it


class ChunkSplitter(BaseDocumentTransformer):
    """Heading-, paragraph- and sentence-aware splitter for Chinese and English text and source code.

    Example::

        >>> splitter = ChunkSplitter(chunk_size=30, chunk_overlap=10)
        >>> [c.text for c in splitter.split_text("# 简介\\n\\n星河知识库是一款产品。它支持PDF。\\n\\n## 安装\\n\\n运行安装程序。")]
        ['# 简介\\n\\n星河知识库是一款产品。它支持PDF。', '## 安装\\n\\n运行安装程序。']
    """

    def __init__(
        self,
        chunk_size: int = 800,
        chunk_overlap: int = 100,
        unit: str | SplitUnit = SplitUnit.CHARS,
        length_function: Callable[[str], int] | None = None,
        mode: str | SplitMode = SplitMode.AUTO,
    ) -> None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
            raise ConfigError(f"chunk_size={chunk_size!r} must be a positive integer")
        if isinstance(chunk_overlap, bool) or not isinstance(chunk_overlap, int) or chunk_overlap < 0:
            raise ConfigError(f"chunk_overlap={chunk_overlap!r} must be an integer >= 0")
        if chunk_overlap >= chunk_size:
            raise ConfigError(f"chunk_overlap={chunk_overlap} must be smaller than chunk_size={chunk_size}")
        if length_function is not None and not callable(length_function):
            raise ConfigError(f"length_function={length_function!r} is not callable")
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.unit = SplitUnit.from_str(unit)
        self.mode = SplitMode.from_str(mode)
        if length_function is None:
            length_function = len if self.unit is SplitUnit.CHARS else approx_token_count
        self.length_function = length_function

    @classmethod
    def from_settings(cls, chunking: Any, **overrides: Any) -> ChunkSplitter:
        """From `ctxrag.settings.ChunkingSettings` (``chunk_size``, ``chunk_overlap``, ``unit``)."""
        options = {"chunk_size": chunking.chunk_size, "chunk_overlap": chunking.chunk_overlap, "unit": chunking.unit}
        return cls(**{**options, **overrides})

    def __repr__(self) -> str:
        return (f"ChunkSplitter(chunk_size={self.chunk_size}, chunk_overlap={self.chunk_overlap}, "
                f"unit={self.unit.value!r}, mode={self.mode.value!r})")

    # ---- public API -------------------------------------------------------------------------------------
    def split_text(self, text: str, mode: str | SplitMode | None = None) -> list[Chunk]:
        """Split ``text``; ``mode`` overrides the splitter's (``auto`` means ``text`` here)."""
        chosen = self.mode if mode is None else SplitMode.from_str(mode)
        run = copy.copy(self)  # per-call state on a copy keeps one splitter safe to share across threads
        run._text = text
        if chosen is SplitMode.CODE:
            atoms, paths = run._code_atoms()
            groups = [atoms]
        else:
            groups, paths = run._text_atoms()
        chunks: list[Chunk] = []
        for atoms in groups:
            for start, end, first, last in run._pack(atoms):
                chunk = run._make_chunk(atoms, start, end, first, last, paths, len(chunks))
                if chunk is not None:
                    chunks.append(chunk)
        return chunks

    def split_documents(self, documents: Iterable[Document]) -> list[Document]:
        """Split LangChain Documents; each chunk keeps the parent's metadata plus ``chunk_index``,
        ``start_index``, ``end_index`` and ``heading_path``. ``auto`` mode splits ``file_type == "code"`` as code."""
        out: list[Document] = []
        for doc in documents:
            mode = self.mode
            if mode is SplitMode.AUTO:
                mode = SplitMode.CODE if doc.metadata.get("file_type") == "code" else SplitMode.TEXT
            for chunk in self.split_text(doc.page_content, mode=mode):
                metadata = {**doc.metadata, "chunk_index": chunk.index, "start_index": chunk.start_index,
                            "end_index": chunk.end_index, "heading_path": chunk.heading_path}
                out.append(Document(page_content=chunk.text, metadata=metadata))
        return out

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        return self.split_documents(documents)

    _text: str = ""

    # ---- measuring and decomposing ----------------------------------------------------------------------
    def _measure(self, start: int, end: int) -> int:
        return self.length_function(self._text[start:end].strip())

    def _fits(self, start: int, end: int) -> bool:
        return self._measure(start, end) <= self.chunk_size

    def _cuts(self, level: int, start: int, end: int) -> list[tuple[int, int]]:
        """[start, end) cut after every separator match of ``level`` (separators stay with the left piece)."""
        points = [m.end() for m in _PATTERNS[level].finditer(self._text, start, end) if start < m.end() < end]
        bounds = [start, *points, end]
        pieces: list[tuple[int, int]] = []
        for a, b in zip(bounds, bounds[1:]):
            if pieces and (b <= a or not self._text[a:b].strip()):
                pieces[-1] = (pieces[-1][0], b)  # whitespace-only piece: keep it with the text before
            elif b > a:
                pieces.append((a, b))
        return pieces

    def _char_cut(self, start: int, end: int, first_level: int, section: int) -> list[_Atom]:
        atoms: list[_Atom] = []
        while start < end:
            lo, step = start + 1, max(self.chunk_size, 1)
            # gallop first, so a long unbroken run costs O(chunk) per atom instead of measuring the whole run
            while start + step < end and self._fits(start, start + step):
                lo, step = start + step, step * 2
            hi = min(start + step, end)
            while lo < hi:  # binary search: the longest prefix that fits (at least one character)
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if self._fits(start, mid) else (lo, mid - 1)
            atoms.append(_Atom(start, lo, first_level if not atoms else CHAR, section))
            start = lo
        return atoms

    def _decompose(self, start: int, end: int, first_level: int, section: int, level: int = PARAGRAPH) -> list[_Atom]:
        # paragraphs, sentences and lines are always separate atoms (good break and overlap points);
        # clause, word and character cuts only for pieces that are still too large
        if level > LINE and self._fits(start, end):
            return [_Atom(start, end, first_level, section)]
        if level == CHAR:
            return self._char_cut(start, end, first_level, section)
        atoms: list[_Atom] = []
        for k, (a, b) in enumerate(self._cuts(level, start, end)):
            atoms.extend(self._decompose(a, b, first_level if k == 0 else level, section, level + 1))
        return atoms

    def _text_atoms(self) -> tuple[list[list[_Atom]], list[tuple[str, ...]]]:
        """Atoms grouped by top-level section, and the heading path of every section."""
        text = self._text
        headings: list[tuple[int, int, int, str]] = []  # (line start, line end, level, title)
        in_fence, offset = False, 0
        for line in text.splitlines(keepends=True):
            if _FENCE.match(line):
                in_fence = not in_fence
            elif not in_fence and (m := _HEADING.match(line.rstrip("\r\n"))):
                title = re.sub(r"[ \t]+#+[ \t]*$", "", m.group(2)).strip()
                headings.append((offset, offset + len(line), len(m.group(1)), title))
            offset += len(line)
        top_level = min((h[2] for h in headings), default=1)
        # (start, end, path, heading line end, heading level); text before the first heading has no heading
        sections: list[tuple[int, int, tuple[str, ...], int | None, int]] = []
        first_heading = headings[0][0] if headings else len(text)
        if first_heading > 0:
            sections.append((0, first_heading, (), None, 0))
        stack: list[tuple[int, str]] = []
        for k, (start, line_end, level, title) in enumerate(headings):
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            end = headings[k + 1][0] if k + 1 < len(headings) else len(text)
            sections.append((start, end, tuple(t for _, t in stack), line_end, level))
        groups: list[list[_Atom]] = []
        paths: list[tuple[str, ...]] = []
        for index, (start, end, path, line_end, level) in enumerate(sections):
            paths.append(path)
            if level <= top_level or not groups:
                groups.append([])
            body_start = start
            if line_end is not None:
                # the heading line plus the blank lines after it form one atom that never ends a chunk
                body_start = line_end + (len(text[line_end:end]) - len(text[line_end:end].lstrip()))
                for atom in self._decompose(start, body_start, SECTION, index, CLAUSE):
                    atom.heading = True
                    groups[-1].append(atom)
            if body_start < end:
                first = PARAGRAPH if line_end is not None else SECTION
                groups[-1].extend(self._decompose(body_start, end, first, index))
        return groups, paths

    def _code_atoms(self) -> tuple[list[_Atom], list[tuple[str, ...]]]:
        """One atom per line (blank lines stick to the line before); definitions start labelled sections."""
        text = self._text
        lines = text.splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line))
        levels = [LINE] * len(lines)
        paths: list[tuple[str, ...]] = [()]
        section_starts: dict[int, int] = {}  # line number -> index into paths
        for k, line in enumerate(lines):
            if k > 0 and not lines[k - 1].strip() and line.strip():
                levels[k] = PARAGRAPH if not line[0].isspace() else SENTENCE
            if m := _CODE_DEF.match(line):
                first = k  # decorators and comments right above a definition belong to it
                while first > 0 and lines[first - 1].strip() and _CODE_PREAMBLE.match(lines[first - 1]):
                    first -= 1
                levels[first] = SECTION
                paths.append((f"{m.group(1)} {m.group(2)}" if m.group(2) else m.group(1),))
                section_starts[first] = len(paths) - 1
        atoms: list[_Atom] = []
        section = 0
        for k, line in enumerate(lines):
            section = section_starts.get(k, section)
            if not line.strip() and atoms:
                atoms[-1].end = starts[k + 1]
                continue
            atoms.extend(self._decompose(starts[k], starts[k + 1], levels[k], section, WORD))
        return atoms, paths

    # ---- packing ----------------------------------------------------------------------------------------
    def _last_fitting(self, atoms: list[_Atom], i: int, hi: int, limit: int) -> int:
        """Largest j in [i, hi) with measure(atom i .. atom j) <= limit (i - 1 when none); galloping + bisection,
        so a chunk costs O(log atoms) length calls (lengths grow with the span)."""
        if self._measure(atoms[i].start, atoms[i].end) > limit:
            return i - 1
        lo, step = i, 1
        while lo + step < hi and self._measure(atoms[i].start, atoms[lo + step].end) <= limit:
            lo, step = lo + step, step * 2
        top = min(lo + step, hi)  # lo fits (or is i); top does not fit or is out of range
        while top - lo > 1:
            mid = (lo + top) // 2
            lo, top = (mid, top) if self._measure(atoms[i].start, atoms[mid].end) <= limit else (lo, mid)
        return lo

    def _pack(self, atoms: list[_Atom]) -> Iterable[tuple[int, int, int, int]]:
        """Yield ``(start, end, first_atom, last_atom)`` per chunk."""
        n, i, min_break = len(atoms), 0, 1
        # next_section[k]: the first section start at or after atom k (n when none), computed once so that finding
        # where a chunk's section ends is O(1) per chunk instead of a rescan of the remaining atoms (was quadratic)
        next_section = [n] * (n + 1)
        for k in range(n - 1, -1, -1):
            next_section[k] = k if atoms[k].level == SECTION else next_section[k + 1]
        while i < n:
            hi = n
            if atoms[i].level != SECTION:  # a chunk that continues a section ends where the next section starts
                hi = next_section[min(max(i + 1, min_break), n)]
            j = max(self._last_fitting(atoms, i, hi, self.chunk_size), i) + 1  # atoms i..j-1 fit (or just atom i)
            b = j if j >= hi else self._choose_break(atoms, i, j, min_break)
            b = max(b, min(min_break, n))  # always make progress, even with an odd length_function
            yield atoms[i].start, atoms[b - 1].end, i, b - 1
            if b >= n:
                return
            i, min_break = self._overlap_start(atoms, i, b), b + 1

    def _choose_break(self, atoms: list[_Atom], i: int, j: int, min_break: int) -> int:
        """Break before atom ``b`` in (i, j]: the strongest boundary leaving the chunk full enough, latest wins."""
        # first b whose chunk (atoms i..b-1) reaches the fill most levels ask for
        half = self._last_fitting(atoms, i, j, math.ceil(_HALF_FULL * self.chunk_size) - 1) + 2
        best: tuple[int, int] | None = None  # (level, -b)
        for b in range(max(i + 1, min_break), j + 1):
            level = atoms[b].level
            if atoms[b - 1].heading or (b < half and level not in (SECTION, CHAR)):
                continue
            if best is None or (level, -b) < best:
                best = (level, -b)
        return -best[1] if best else j

    def _overlap_start(self, atoms: list[_Atom], i: int, b: int) -> int:
        """First atom of the next chunk: trailing atoms of this one (whole sentences preferred), same section."""
        if not self.chunk_overlap or atoms[b].level == SECTION:
            return b
        best, best_key = b, None
        for a in range(b - 1, i, -1):
            if atoms[a].section != atoms[b].section:
                break
            if (self._measure(atoms[a].start, atoms[b - 1].end) > self.chunk_overlap
                    or self._measure(atoms[a].start, atoms[b].end) > self.chunk_size):
                break
            key = (max(atoms[a].level, SENTENCE), -(b - a))
            if best_key is None or key < best_key:
                best, best_key = a, key
        return best

    def _make_chunk(self, atoms: list[_Atom], start: int, end: int, first: int, last: int,
                    paths: list[tuple[str, ...]], index: int) -> Chunk | None:
        raw = self._text[start:end]
        stripped = raw.strip()
        if not stripped:
            return None
        start += len(raw) - len(raw.lstrip())
        common = list(paths[atoms[first].section])
        for atom in atoms[first + 1:last + 1]:
            path = paths[atom.section]
            k = 0
            while k < len(common) and k < len(path) and common[k] == path[k]:
                k += 1
            del common[k:]
        return Chunk(stripped, index, start, start + len(stripped), " > ".join(common))


ChineseAwareSplitter = ChunkSplitter
