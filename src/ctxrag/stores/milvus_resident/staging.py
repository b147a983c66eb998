"""Staged copies of a Milvus-resident replace: the marker row that opens one, what a staged copy is, and whether the
writer that staged it is still alive.

A replace writes the new version of a document whole to the staging collection before it touches the stored one
(`ctxrag.stores.milvus_resident.store`). Its first staged row is a *marker* (chunk index -1, never a chunk): the
write id, the chunk count the copy must reach, when staging started, and which process stages (host and pid). From
the marker and the rows that carry its write id, `StagedCopy` says whether the copy is whole and whether its writer
is alive, which is how ``kb check`` tells a replace in flight on another process from one a kill left behind.

The writer is alive by `ctxrag.stores.milvus_resident.writers.writer_alive`: on the host that staged it while its
process runs, on another while its heartbeat is younger than the grace period.

Example::

    from ctxrag.stores.milvus_resident.staging import StagedCopy, writer_here
    copy = StagedCopy("d1", "a.md", "9f2c", n_chunks=3, staged=3, writer={**writer_here(), "started": 0.0})
    copy.whole, copy.alive(now=10.0, grace_s=600.0)      # (True, True): this process staged it
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxrag.stores.documents.docstore import ChunkRecord
from ctxrag.stores.milvus_resident.writers import describe_writer, writer_alive, writer_here

__all__ = ["CHUNKS_ONLY", "MARKER_INDEX", "StagedCopy", "marker_id", "marker_record", "writer_here"]

MARKER_INDEX = -1
"""The chunk index of a marker row: real chunks count from 0, so ``chunk_index >= 0`` selects the staged chunks."""
CHUNKS_ONLY = f"chunk_index > {MARKER_INDEX}"


def marker_id(doc_id: str) -> str:
    """The staging collection's primary key of `doc_id`'s marker."""
    return f"~staging~{doc_id}"


def marker_record(doc_id: str, source: str, n_chunks: int, writer: dict[str, Any]) -> ChunkRecord:
    """The marker row's chunk record for staging `doc_id` (`n_chunks` chunks) by `writer` (`writers.writer_now`)."""
    md = {"source": source, "n_chunks": n_chunks, **writer}
    return ChunkRecord(marker_id(doc_id), doc_id, MARKER_INDEX, "", "", None, md)


@dataclass
class StagedCopy:
    """The staged rows of one document: from which write, how many of how many, and who staged them."""

    doc_id: str
    source: str
    write_id: str
    n_chunks: int | None
    """From the marker; None when the marker is missing (rows staged before markers existed)."""
    staged: int
    """Staged chunk rows carrying `write_id`."""
    writer: dict[str, Any] = field(default_factory=dict)
    """host, pid, proc, started (epoch seconds) and id from the marker; empty without one."""

    @property
    def whole(self) -> bool:
        return self.n_chunks is not None and self.staged == self.n_chunks

    def alive(self, now: float | None = None, grace_s: float = 600.0,
              beats: Mapping[str, float] | None = None) -> bool:
        """Whether the writer may still be staging or swapping (`writers.writer_alive`; `beats`: writer id -> last
        heartbeat)."""
        return writer_alive(self.writer, now, grace_s, beats)

    def describe(self, now: float | None = None, grace_s: float = 600.0,
                 beats: Mapping[str, float] | None = None) -> str:
        """One line for ``kb check``: the document, the write, how much is staged and the writer's state."""
        count = f"{self.staged} of {self.n_chunks}" if self.n_chunks is not None else f"{self.staged} (no marker)"
        return f"{self.source or self.doc_id} (doc {self.doc_id}): write {self.write_id}, {count} chunks staged, " \
               f"writer {describe_writer(self.writer or None, now, grace_s, beats)}"
