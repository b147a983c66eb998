"""Memory-mapped index files that cost a request a named error, never the process, when damaged in place.

FAISS (``index.faiss``) and BM25 (``bm25.npz``) are opened as memory maps, so loading a large index costs only the
pages a query touches. A mapped file that is truncated afterwards (``truncate -s0``, a disk tool, a bad copy over it)
would kill the process with SIGBUS on the next access to a page past the new end: Python cannot catch that signal.
Committed generation files are never changed in place by ctxrag (a writer writes a new generation and renames it into
place; clean-up unlinks, which keeps the mapped pages), so a mapped file that got *shorter* under the same inode is
damage. `MappedFile.check` compares with one ``stat`` (microseconds) before each access and raises
`IndexCorruptError` naming the file instead.

Example::

    from ctxrag.stores.mapped import MappedFile
    mapped = MappedFile(Path("indexes/gen-000003/dense/index.faiss"))
    mapped.check()          # before touching the mapping: IndexCorruptError if the file shrank since
"""
from __future__ import annotations

import os
from pathlib import Path

from ctxrag.errors import IndexCorruptError


class MappedFile:
    """The size and identity (device, inode) of a file at the time it was memory-mapped."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        st = os.stat(self.path)
        self.inode = (st.st_dev, st.st_ino)
        self.size = st.st_size

    def check(self) -> None:
        """`IndexCorruptError` if the mapped file is now shorter than when it was mapped (reading the mapping past
        the new end would be SIGBUS). A file unlinked or replaced by rename is fine: the mapping keeps its pages."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) == self.inode and st.st_size < self.size:
            raise IndexCorruptError(
                f"{self.path}: index file was truncated from {self.size} to {st.st_size} bytes while in use "
                "(damaged in place; this request was refused instead of reading it); run `ctxrag kb repair NAME` "
                "to rebuild it from the document store")

    def __repr__(self) -> str:
        return f"MappedFile({str(self.path)!r}, size={self.size})"
