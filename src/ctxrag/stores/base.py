"""The contract every per-knowledge-base index (dense, BM25, graph) fulfils, so the knowledge base can keep them in step.

The knowledge base owns persistence and atomicity: it calls `add`/`delete` on every registered index while ingesting,
then `save(directory)` into a fresh generation folder, and only then commits SQLite, which records that generation as
current. An index therefore writes plain files into the folder it is given and never renames or deletes outside it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass
class IndexedChunk:
    """What an index receives for one chunk.

    `text` is the text to index (the chunk, with its context prepended when contextual retrieval is on);
    `content` is the chunk as users see and cite it; `vector` is set for dense indexes (unit-normalised float32).
    """

    chunk_id: str
    doc_id: str
    text: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    vector: np.ndarray | None = None


@runtime_checkable
class ChunkIndex(Protocol):
    """An index over a knowledge base's chunks."""

    name: str
    """Folder name of this index inside a generation folder (e.g. ``"dense"``, ``"bm25"``)."""

    def add(self, chunks: list[IndexedChunk]) -> None:
        """Add chunks; a chunk id already present is replaced."""

    def delete(self, chunk_ids: list[str]) -> None:
        """Remove chunks; unknown ids are ignored."""

    def save(self, directory: Path) -> None:
        """Write the whole index into `directory` (created, empty). No pickle."""

    def chunk_ids(self) -> list[str]:
        """Ids of the chunks it holds (in insertion order where the index keeps one): what consistency checks and
        repairs compare with the document store."""

    def __len__(self) -> int: ...
