"""What one ingest did: per-file outcomes (added, updated, skipped, failed) and the contextualizer's report."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class FileOutcome:
    """What ingest did with one file: ``added``, ``updated``, ``skipped`` (unchanged) or ``failed``."""

    path: str
    status: Literal["added", "updated", "skipped", "failed"]
    reason: str = ""
    doc_id: str | None = None
    chunks: int = 0


@dataclass
class IngestReport:
    """Per-file outcomes of one `KnowledgeBase.ingest` call, plus the contextualizer's report when one ran."""

    files: list[FileOutcome] = field(default_factory=list)
    context_report: Any = None

    def _by(self, status: str) -> list[FileOutcome]:
        return [f for f in self.files if f.status == status]

    @property
    def added(self) -> list[FileOutcome]:
        return self._by("added")

    @property
    def updated(self) -> list[FileOutcome]:
        return self._by("updated")

    @property
    def skipped(self) -> list[FileOutcome]:
        return self._by("skipped")

    @property
    def failed(self) -> list[FileOutcome]:
        return self._by("failed")

    @property
    def ok(self) -> bool:
        return not self.failed
