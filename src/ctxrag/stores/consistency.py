"""Comparing a knowledge base's document store with each of its indexes by chunk id (``ctxrag kb check``), and the
report of a repair (``ctxrag kb repair``).

Example::

    from ctxrag.stores.consistency import compare_ids
    diff = compare_ids("bm25", {"a:0", "b:0"}, {"a:0", "x:0"})
    diff.missing, diff.extra        # (["b:0"], ["x:0"])
"""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_LISTED = 20
"""Chunk ids listed per difference in `CheckReport.lines` (all of them are in the report object)."""


@dataclass
class IndexDifference:
    """How one index differs from the document store: chunk ids it lacks, ids it has that the store does not, or
    an error that kept it from loading."""

    index: str
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.error)


def compare_ids(name: str, store_ids: set[str], index_ids: set[str]) -> IndexDifference:
    return IndexDifference(name, sorted(store_ids - index_ids), sorted(index_ids - store_ids))


@dataclass
class CheckReport:
    """What ``ctxrag kb check`` reports (`ctxrag.kb.maintenance.check` for a local knowledge base,
    `MilvusKnowledgeBase.check` for one in Milvus): per index, its chunk count and differences from the document
    store."""

    kb: str
    generation: int
    chunks: int
    counts: dict[str, int | None] = field(default_factory=dict)
    differences: list[IndexDifference] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    """Writes another process is still doing (a Milvus-resident knowledge base's), one line each: shown, not
    damage."""

    @property
    def clean(self) -> bool:
        return all(d.clean for d in self.differences)

    def lines(self) -> list[str]:
        out = [f"knowledge base {self.kb!r}: generation {self.generation}, {self.chunks} chunks in the document store"]
        for d in self.differences:
            count = self.counts.get(d.index)
            if d.error:
                out.append(f"  {d.index}: ERROR {d.error}")
                continue
            status = "ok" if d.clean else "DIFFERS"
            unit = "documents" if d.index == "documents" else "chunks"  # a Milvus-resident base counts its rows
            out.append(f"  {d.index}: {count} {unit}, {status}")
            for label, ids in (("missing from the index", d.missing), ("in the index but not stored", d.extra)):
                for cid in ids[:MAX_LISTED]:
                    out.append(f"    {label}: {cid}")
                if len(ids) > MAX_LISTED:
                    out.append(f"    ... and {len(ids) - MAX_LISTED} more {label}")
        for line in self.in_flight[:MAX_LISTED]:
            out.append(f"  in flight (a writer still running, not damage): {line}")
        if len(self.in_flight) > MAX_LISTED:
            out.append(f"  ... and {len(self.in_flight) - MAX_LISTED} more writes in flight")
        if not self.clean:
            out.append(f"run `ctxrag kb repair {self.kb}` to rebuild what is missing or damaged")
        return out


@dataclass
class RepairReport:
    """`KnowledgeBase.repair`: what was done to each index and the generation committed (None: nothing to do)."""

    kb: str
    actions: dict[str, str] = field(default_factory=dict)
    generation: int | None = None

    def lines(self) -> list[str]:
        out = [f"  {name}: {what}" for name, what in self.actions.items()]
        if self.generation is None:
            return [f"knowledge base {self.kb!r}: nothing to repair", *out]
        return [f"knowledge base {self.kb!r}: repaired, committed generation {self.generation}", *out]
