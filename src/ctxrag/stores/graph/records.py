"""The records a `GraphIndex` keeps (a relation, a passage) and its file format version, shared by the index and
its persistence."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FORMAT = "ctxrag-graph"
VERSION = 1


@dataclass
class Relation:
    key: str
    text: str
    subject: int
    object: int
    passages: list[str] = field(default_factory=list)


@dataclass
class Passage:
    text: str
    relations: list[int]
    metadata: dict[str, Any]
