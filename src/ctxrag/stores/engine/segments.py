"""Segmented indexes: one index kind (dense, BM25) kept as immutable segment folders plus per-segment tombstones.

A commit writes only what it adds: the chunks added by a write session form one new segment (a plain index of the
kind, saved into its own folder under ``indexes/segments/``), deletes become tombstones (chunk ids) of the segments
holding them, and the generation folder gets a small ``segments.json`` that lists the segments, their files' sizes
and sha256, and their tombstones. Segment folders are shared by every generation that lists them, never copied;
clean-up (`GenerationStore.clean`) removes one only when no kept generation lists it.

Layout::

    indexes/gen-000042/dense/segments.json     the generation's segment list for the dense index
    indexes/segments/dense-000041-1a2b3c4d/     one sealed segment (index.faiss, ids.json, ...), immutable
    indexes/segments/.tmp-...                   a segment being written (renamed when complete; never read)

Searching across segments is the job of the kind (`SegmentedDenseIndex` merges per-segment top-k,
`SegmentedKeywordIndex` scores every segment with the statistics of the whole corpus). A generation written before
segments existed (no ``segments.json``) is read as one segment and hard-linked into ``indexes/segments/`` on the
first write. Small segments are merged by a tiered policy at commit (`MergePolicy`), all of them by ``ctxrag kb
optimize``.

Example::

    from ctxrag.stores.vectors.dense import FaissIndex
    from ctxrag.stores.vectors.dense_segments import SegmentedDenseIndex
    index = SegmentedDenseIndex("dense", FaissIndex, FaissIndex.load)
    index.add(chunks)                                   # a fresh in-memory segment
    index.save_segments(gen_dir / "dense", segments_dir, generation=1)   # seals it
"""
from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxrag.errors import IndexCorruptError
from ctxrag.fileio import atomic_write_json, fsync_dir, fsync_tree
from ctxrag.stores.base import ChunkIndex, IndexedChunk
from ctxrag.stores.engine.segment_checksums import (
    TMP_PREFIX,
    checksums,
    remember_verified,
    repair_hint,
    stamp,
    verify,
    write_marker,
)

SEGMENTS_DIR = "segments"
SET_FILE = "segments.json"
SET_FORMAT = "ctxrag-segments"
SET_VERSION = 1

MakeIndex = Callable[[], ChunkIndex]
LoadIndex = Callable[[Path], "ChunkIndex | None"]


def segments_dir_of(index_dir: Path) -> Path:
    """``indexes/segments`` for an index folder ``indexes/gen-N/<kind>``."""
    return Path(index_dir).parent.parent / SEGMENTS_DIR


@dataclass(frozen=True)
class MergePolicy:
    """When a commit merges segments (Lucene's log merge policy, with a tombstone bound).

    Segments fall into size tiers (`merge_factor` times apart, everything under `min_size` chunks in the lowest);
    when the newest `merge_factor` segments share a tier they are merged into one of the next tier. A segment whose
    tombstones pass `max_dead_fraction` is rewritten without them. One merge per commit at most, so a write never
    pays for more than one step."""

    merge_factor: int = 10
    min_size: int = 1_000
    max_dead_fraction: float = 0.3

    def __post_init__(self) -> None:
        if self.merge_factor < 2:
            raise ValueError(f"merge_factor must be >= 2, got {self.merge_factor}")
        if not 0 < self.max_dead_fraction <= 1:
            raise ValueError(f"max_dead_fraction must be in (0, 1], got {self.max_dead_fraction}")

    def tier(self, size: int) -> int:
        return int(math.log(max(size, self.min_size) / self.min_size, self.merge_factor))

    def pick(self, sizes: list[int], dead: list[int]) -> range | None:
        """The run of adjacent segments (by position) to merge next, or None. `sizes` counts every chunk a segment
        was written with, `dead` its tombstones."""
        for i, (n, d) in enumerate(zip(sizes, dead)):
            if n and d / n > self.max_dead_fraction:
                return range(i, i + 1)
        if len(sizes) < self.merge_factor:
            return None
        tail = [self.tier(n - d) for n, d in zip(sizes[-self.merge_factor:], dead[-self.merge_factor:])]
        if len(set(tail)) == 1:
            return range(len(sizes) - self.merge_factor, len(sizes))
        return None


@dataclass
class Sealed:
    """One immutable segment: its folder, the loaded index, its files' checksums and its tombstones."""

    id: str
    directory: Path
    index: ChunkIndex
    size: int
    """Chunks the segment was written with (live and tombstoned)."""
    files: dict[str, dict[str, Any]] | None = None
    """rel path -> {size, sha256}; None for a segment read from a generation that predates segments."""
    dead: set[str] = field(default_factory=set)

    @property
    def live(self) -> int:
        return self.size - len(self.dead)


def _publish(segments_dir: Path, seg_id: str, fill: Callable[[Path], None]) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Write a segment under a temporary name with `fill`, checksum and fsync it, then rename it into place (a
    crash leaves only a temporary folder that clean-up removes); returns its folder and file checksums."""
    tmp = segments_dir / f"{TMP_PREFIX}{seg_id}"
    try:
        fill(tmp)
        files = checksums(tmp)
        fsync_tree(tmp)
        final = segments_dir / seg_id
        os.replace(tmp, final)
        fsync_dir(segments_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    remember_verified(final, files)
    write_marker(final, {rel: stamp(final / rel, want["sha256"]) for rel, want in files.items()})
    return final, files


class SegmentedIndex:
    """A `ChunkIndex` of one kind made of sealed segments plus one fresh in-memory segment for this write's adds.

    Subclasses add the kind's search (`SegmentedDenseIndex`, `SegmentedKeywordIndex`). `make` builds an empty
    index of the kind, `load_segment` loads one from a folder (None: "rebuild from the document store")."""

    tombstones_in_index = False
    """True when a tombstone is also applied to the loaded segment object (`hide_in`: BM25 deletes it, so its
    statistics exclude it; FAISS hides it behind an id selector); else searches must filter tombstoned ids out."""

    def __init__(self, name: str, make: MakeIndex, load_segment: LoadIndex, *,
                 policy: MergePolicy | None = None, kb_name: str = "NAME") -> None:
        self.name = name
        self.kb_name = kb_name
        """The knowledge base's name, for the repair command in error messages."""
        self._make = make
        self._load_segment = load_segment
        self.policy = policy or MergePolicy()
        self.sealed: list[Sealed] = []
        self.fresh: ChunkIndex | None = None
        self._merge_all = False
        self.version = 0
        """Bumped by every change (searches cache per-version state)."""

    # -- ChunkIndex -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return sum(s.live for s in self.sealed) + (len(self.fresh) if self.fresh is not None else 0)

    def __contains__(self, chunk_id: object) -> bool:
        if self.fresh is not None and chunk_id in self.fresh:
            return True
        return any(chunk_id not in s.dead and chunk_id in s.index for s in self.sealed)

    def chunk_ids(self) -> list[str]:
        """Live chunk ids, oldest segment first (insertion order)."""
        out: list[str] = []
        for s in self.sealed:
            ids = s.index.chunk_ids()
            out.extend(ids if self.tombstones_in_index or not s.dead else [c for c in ids if c not in s.dead])
        if self.fresh is not None:
            out.extend(self.fresh.chunk_ids())
        return out

    def add(self, chunks: list[IndexedChunk]) -> None:
        if not chunks:
            return
        self._tombstone([c.chunk_id for c in chunks])
        if self.fresh is None:
            self.fresh = self._new_segment()
        self.fresh.add(chunks)
        self.version += 1

    def _new_segment(self) -> ChunkIndex:
        """An empty segment for this write's adds (the kind may match it to the sealed ones)."""
        return self._make()

    def delete(self, chunk_ids: list[str]) -> None:
        if self.fresh is not None:
            self.fresh.delete(chunk_ids)
        self._tombstone(chunk_ids)
        self.version += 1

    def _tombstone(self, chunk_ids: list[str]) -> None:
        for s in self.sealed:
            hit = [c for c in chunk_ids if c not in s.dead and c in s.index]
            if hit:
                s.dead.update(hit)
                if self.tombstones_in_index:
                    self.hide_in(s.index, hit)

    def hide_in(self, index: ChunkIndex, chunk_ids: list[str]) -> None:
        """Apply tombstones to a loaded segment (in memory only; segment files never change)."""
        index.delete(chunk_ids)

    def parts(self) -> Iterator[tuple[ChunkIndex, set[str]]]:
        """Each segment's index with the tombstones a search must skip (none where they are applied), oldest
        first, the fresh segment last."""
        for s in self.sealed:
            yield s.index, (set() if self.tombstones_in_index else s.dead)
        if self.fresh is not None and len(self.fresh):
            yield self.fresh, set()

    # -- merging ----------------------------------------------------------------------------------------------
    def merge_all(self) -> None:
        """Merge every segment into one at the next save (``ctxrag kb optimize``)."""
        self._merge_all = True
        self.version += 1

    def merged(self, parts: list[tuple[ChunkIndex, set[str]]]) -> ChunkIndex:
        """One index of the kind holding the live chunks of `parts`, in order (subclasses know how)."""
        raise NotImplementedError

    def _merge(self, run: range, segments_dir: Path, generation: int) -> None:
        chosen = self.sealed[run.start:run.stop]
        for s in chosen:  # as Lucene's merges do: damage the open skipped must not be sealed into a new segment
            if s.files is not None:
                verify(s.directory, s.files, self.kb_name, full=True)
        index = self.merged([(s.index, set() if self.tombstones_in_index else s.dead) for s in chosen])
        self.sealed[run.start:run.stop] = [self._write(index, segments_dir, generation)] if len(index) else []

    # -- persistence ------------------------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        """Self-contained save: the segments go into ``directory/segments``."""
        self.save_segments(Path(directory), Path(directory) / SEGMENTS_DIR, generation=0)

    def save_segments(self, directory: Path, segments_dir: Path, *, generation: int) -> None:
        """Seal the fresh segment into `segments_dir`, take a merge step, and write ``segments.json`` (the
        segment list with checksums and tombstones) into `directory`. Earlier segments are referenced, never
        rewritten; one read from a pre-segment generation is hard-linked into `segments_dir`."""
        directory.mkdir(parents=True, exist_ok=True)
        segments_dir.mkdir(parents=True, exist_ok=True)
        for i, s in enumerate(self.sealed):
            if s.files is None or s.directory.parent != segments_dir:
                self.sealed[i] = self._adopt(s, segments_dir, generation)
        if self.fresh is not None and len(self.fresh):
            self.sealed.append(self._write(self.fresh, segments_dir, generation))
        self.fresh = None
        if self._merge_all:
            if len(self.sealed) > 1 or any(s.dead for s in self.sealed):
                self._merge(range(0, len(self.sealed)), segments_dir, generation)
            self._merge_all = False
        else:
            run = self.policy.pick([s.size for s in self.sealed], [len(s.dead) for s in self.sealed])
            if run is not None:
                self._merge(run, segments_dir, generation)
        atomic_write_json(directory / SET_FILE, {
            "format": SET_FORMAT, "version": SET_VERSION, "kind": self.name, "generation": generation,
            "segments": [{"id": s.id, "size": s.size, "files": s.files, "dead": sorted(s.dead)} for s in self.sealed],
        })

    def _new_id(self, generation: int) -> str:
        return f"{self.name}-{generation:06d}-{uuid.uuid4().hex[:8]}"

    def _write(self, index: ChunkIndex, segments_dir: Path, generation: int) -> Sealed:
        seg_id = self._new_id(generation)
        def fill(tmp: Path) -> None:
            tmp.mkdir(parents=True)
            index.save(tmp)

        final, files = _publish(segments_dir, seg_id, fill)
        freeze = getattr(index, "freeze", None)
        if freeze is not None:  # sealed: its id map becomes arrays, so later write sessions copy it cheaply
            freeze()
        return Sealed(seg_id, final, index, len(index), files)

    def _adopt(self, s: Sealed, segments_dir: Path, generation: int) -> Sealed:
        """Hard-link the files of a segment outside `segments_dir` (a pre-segment generation folder) into it."""
        seg_id = self._new_id(generation)
        def fill(tmp: Path) -> None:
            for p in sorted(s.directory.rglob("*")):
                if p.is_file():
                    target = tmp / p.relative_to(s.directory)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    try:
                        os.link(p, target)
                    except OSError:  # another file system, or links not supported: copy once
                        shutil.copy2(p, target)

        final, files = _publish(segments_dir, seg_id, fill)
        return Sealed(seg_id, final, s.index, s.size, files, s.dead)

    reopens = False
    """True for kinds whose loaded segments can be forked (`reopen`); the others load every segment."""

    def reopen(self, directory: Path) -> "SegmentedIndex | None":
        """This kind's index of the generation folder `directory` (usually the next one), sharing the segments it
        has in common with this index instead of loading them again: a write session starts from the published
        generation, and a reader switching to a newer one loads only the segments that are new. This index is
        not changed (each shared segment is forked: its tombstones are the new index's own). None when the kind
        does not reopen: the caller loads the folder."""
        if not self.reopens:
            return None
        out = type(self)(self.name, self._make, self._load_segment, policy=self.policy, kb_name=self.kb_name)
        return out.load_set(directory, reuse={s.id: s for s in self.sealed if s.files is not None})

    def fork_segment(self, index: ChunkIndex) -> ChunkIndex | None:
        """A copy of a loaded segment that shares its immutable data and has its own tombstones (the kind's
        ``fork``), or None when the kind cannot: the segment is then loaded from its folder."""
        fork = getattr(index, "fork", None)
        return fork() if fork is not None else None

    def load_set(self, directory: Path, reuse: dict[str, Sealed] | None = None) -> "SegmentedIndex | None":
        """Fill this (empty) index from an index folder of a generation: its ``segments.json``, or, for a
        generation written before segments, the folder itself as one segment. None when the kind's loader asks
        for a rebuild. `IndexCorruptError` names a missing or damaged segment file. A segment in `reuse` (by id,
        see `reopen`) is forked from there instead of loaded."""
        directory = Path(directory)
        set_path = directory / SET_FILE
        if not set_path.exists():
            index = self._load_segment(directory)
            if index is None:
                return None
            self.sealed = [Sealed(f"legacy-{directory.parent.name}", directory, index, len(index))]
            return self
        try:
            doc = json.loads(set_path.read_text(encoding="utf-8"))
            entries = doc["segments"] if doc.get("format") == SET_FORMAT else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise IndexCorruptError(f"{set_path}: unreadable segment list ({e}); {repair_hint(self.kb_name)}") from None
        if not isinstance(entries, list):
            raise IndexCorruptError(f"{set_path}: not a {SET_FORMAT} segment list")
        _check_generation(set_path, doc.get("generation"), self.kb_name)
        segments_dir = segments_dir_of(directory)
        for e in entries:
            seg_dir = segments_dir / str(e["id"])
            files = e["files"]
            dead = list(e.get("dead", []))
            verify(seg_dir, files, self.kb_name)
            s = self._reused(reuse.get(str(e["id"])) if reuse else None, seg_dir, files, int(e["size"]), dead)
            if s is None:
                index = self._load_segment(seg_dir)
                if index is None:
                    raise IndexCorruptError(f"{seg_dir}: segment of index {self.name!r} cannot be loaded; "
                                            f"{repair_hint(self.kb_name)}")
                s = Sealed(str(e["id"]), seg_dir, index, int(e["size"]), files)
            self.sealed.append(s)
            hit = [c for c in dead if c not in s.dead and c in s.index]
            if hit:
                s.dead.update(hit)
                if self.tombstones_in_index:
                    self.hide_in(s.index, hit)
            missing = set(dead) - s.dead
            if missing:
                raise IndexCorruptError(f"{set_path}: segment {s.id} has tombstones for chunks it does not hold "
                                        f"({sorted(missing)[:3]})")
        return self

    def _reused(self, prior: Sealed | None, seg_dir: Path, files: dict[str, dict[str, Any]], size: int,
                dead: list[str]) -> Sealed | None:
        """`prior` forked for a generation that lists the same segment (tombstones only ever grow), or None."""
        if prior is None or prior.files != files or prior.size != size or not prior.dead <= set(dead):
            return None
        index = self.fork_segment(prior.index)
        return None if index is None else Sealed(prior.id, seg_dir, index, size, files, set(prior.dead))


def _check_generation(set_path: Path, written_for: object, kb_name: str) -> None:
    """A segment list read from a generation folder ``gen-N`` must have been written for N: the chunk ids of an
    older list are often the same (a document rewritten in place), so without this stamp a list copied from another
    generation would serve old text under the current one. Lists written before the stamp carry none."""
    folder = set_path.parent.parent.name
    if written_for is None or not (folder.startswith("gen-") and folder[4:].isdigit()):
        return
    if written_for != int(folder[4:]):
        raise IndexCorruptError(f"{set_path}: segment list of generation {written_for} found in {folder} (copied "
                                f"from another generation: it would serve that generation's text); "
                                f"{repair_hint(kb_name)}")


def referenced_segments(index_dir: Path) -> set[str]:
    """Segment ids the ``segments.json`` in `index_dir` lists (empty when it has none or cannot be read: clean-up
    then keeps what the other kept generations list)."""
    try:
        doc = json.loads((Path(index_dir) / SET_FILE).read_text(encoding="utf-8"))
        return {str(e["id"]) for e in doc["segments"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set()
