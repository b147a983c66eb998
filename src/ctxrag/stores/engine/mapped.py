"""Memory-mapped index files that cost a request a named error, never the process, when damaged in place.

FAISS (``index.faiss``) and BM25 (``bm25.npz``) are opened as memory maps, so loading a large index costs only the
pages a query touches. A mapped file that is truncated afterwards (``truncate -s0``, a disk tool, a bad copy over it)
would kill the process with SIGBUS on the next access to a page past the new end: Python cannot catch that signal.
Committed generation files are never changed in place by ctxrag (a writer writes a new generation and renames it into
place; clean-up unlinks, which keeps the mapped pages), so a mapped file that got *shorter* under the same inode is
damage, and so is one *written to* in place (same size, new modification time: random bytes over it would otherwise
be read as postings or vectors, giving wrong results or a raw numpy error). `MappedFile.check` compares with one
``stat`` (microseconds) before each access and raises `IndexCorruptError` naming the file instead. Bit rot that
leaves the modification time alone is found by the checksums (`ctxrag.stores.engine.segment_checksums`): at the next
open when the file's metadata moved, always by ``ctxrag kb check``.

`advise_huge_pages` asks Linux to back a file's memory maps with huge pages (``MADV_HUGEPAGE``). A query reads a
few thousand vectors or posting lists scattered over a file of a gigabyte or more; mapped 4 KiB at a time, most of
those reads miss the TLB, and a file read back in after the page cache dropped it (a busy machine) comes back in
small pieces. With the advice the kernel reads missing parts in huge-page units and maps them so.

Example::

    from ctxrag.stores.engine.mapped import MappedFile
    mapped = MappedFile(Path("indexes/gen-000003/dense/index.faiss"))
    mapped.check()          # before touching the mapping: IndexCorruptError if the file shrank since
"""
from __future__ import annotations

import ctypes
import mmap
import os
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from ctxrag.errors import IndexCorruptError


class MappedFile:
    """The size, modification time and identity (device, inode) of a file at the time it was memory-mapped."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        st = os.stat(self.path)
        self.inode = (st.st_dev, st.st_ino)
        self.size = st.st_size
        self.mtime_ns = st.st_mtime_ns

    def check(self) -> None:
        """`IndexCorruptError` if the mapped file is now shorter than when it was mapped (reading the mapping past
        the new end would be SIGBUS) or was written to in place since. A file unlinked or replaced by rename is
        fine: the mapping keeps its pages. (A hard link changes only the change time, which is not compared.)"""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) != self.inode:
            return
        if st.st_size < self.size:
            how = f"truncated from {self.size} to {st.st_size} bytes"
        elif st.st_size != self.size or st.st_mtime_ns != self.mtime_ns:
            how = "written to in place (committed index files are never rewritten)"
        else:
            return
        raise IndexCorruptError(
            f"{self.path}: index file was {how} while in use (damaged in place; this request was refused instead "
            "of reading it); run `ctxrag kb repair NAME` to rebuild it from the document store")

    def __repr__(self) -> str:
        return f"MappedFile({str(self.path)!r}, size={self.size})"


_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)


@lru_cache(maxsize=1)
def _madvise() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.madvise
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    func.restype = ctypes.c_int
    return func


def advise_huge_pages(path: Path) -> int:
    """Advise ``MADV_HUGEPAGE`` for every memory map of `path` in this process (one made by FAISS or numpy); the
    number of maps advised. A no-op (0) off Linux or where the kernel refuses: only speed depends on it."""
    if not sys.platform.startswith("linux"):
        return 0
    madvise = _madvise()
    target = os.path.realpath(path)
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    advised = 0
    for line in lines:
        fields = line.split(maxsplit=5)
        if madvise is None or len(fields) < 6 or fields[5] != target:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if madvise(start, end - start, _MADV_HUGEPAGE) == 0:
            advised += 1
    return advised
