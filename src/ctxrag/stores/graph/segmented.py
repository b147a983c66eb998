"""`SegmentedGraphIndex`: the graph index of a knowledge base as immutable segments, so a commit writes what it adds.

Entities are resolved across all chunks (one entity per `entity_key`, one relation per `relation_key`), so the graph
is not searched per segment: a search needs the merged graph. What resolution needs is only key equality, though, so
the graph of a set of passages is the union of the graphs of its parts. Hence:

* On disk, each segment is the subgraph of the passages one commit added (``graph.json``, ``vectors.npz``,
  ``incidence.npz``, the format of `GraphIndex.save`), with the vectors of its entities and relations, and deletes
  are tombstones (passage ids) in the generation's ``segments.json``, exactly as for FAISS and BM25
  (`ctxrag.stores.engine.segments`: the same list, checksums, merge policy and clean-up).
* In memory, `view` is one `GraphIndex` over the live passages, built at load as the union of the segments in order
  (no embedding: every vector is in a segment) and kept up to date by writes; retrievers search it.
  The union equals the graph built from the same live passages in one go (the same entities, relations, passages,
  vectors and incidence), up to the numbering of entities and relations.
* A merge writes the subgraph of the merged segments' live passages, taken from `view`.

A generation saved before graph segments (a whole ``graph.json`` in the generation folder) is read as one segment and
hard-linked into ``indexes/segments/`` on the first write.

Example::

    from ctxrag.models.embeddings import make_embeddings
    from ctxrag.stores.base import IndexedChunk
    g = SegmentedGraphIndex.empty(make_embeddings())
    text = "Euler studied under Bernoulli."
    g.add([IndexedChunk("p1", "p", text, text, metadata={"triplets": [("Euler", "student of", "Bernoulli")]})])
    g.save_segments(gen_dir / "graph", segments_dir, generation=1)   # writes the subgraph of p1 as a segment
    g.view.search_entities(vector, k=5)                             # searches use the merged view
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from ctxrag.stores.base import ChunkIndex, IndexedChunk
from ctxrag.stores.graph.index import GraphIndex
from ctxrag.stores.graph.persistence import read_graph, write_graph
from ctxrag.stores.graph.records import GraphState, Passage, Relation
from ctxrag.stores.engine.segments import MergePolicy, SegmentedIndex


def subgraph(graph: GraphIndex, passage_ids: Sequence[str]) -> GraphState:
    """The graph of `passage_ids` alone (their relations and those relations' entities, with their vectors),
    numbered in order of first use."""
    state = graph.state()
    wanted = set(passage_ids)
    rel_new: dict[int, int] = {}
    ent_new: dict[int, int] = {}
    for pid in passage_ids:
        for rid in state.passages[pid].relations:
            if rid not in rel_new:
                rel_new[rid] = len(rel_new)
                r = state.relations[rid]
                for e in (r.subject, r.object):
                    ent_new.setdefault(e, len(ent_new))
    ents, rels = list(ent_new), list(rel_new)
    relations = [Relation(state.relations[r].key, state.relations[r].text, ent_new[state.relations[r].subject],
                          ent_new[state.relations[r].object], [p for p in state.relations[r].passages if p in wanted])
                 for r in rels]
    passages = {pid: Passage(state.passages[pid].text, [rel_new[r] for r in state.passages[pid].relations],
                             dict(state.passages[pid].metadata)) for pid in passage_ids}
    return GraphState([state.entity_keys[e] for e in ents], [state.entity_names[e] for e in ents], relations, passages,
                      _rows(state.entity_vectors, ents), _rows(state.relation_vectors, rels))


def union(parts: Iterable[tuple[GraphState, set[str]]]) -> GraphState:
    """One graph of the live passages of `parts` (each a graph and the passage ids deleted from it), in order: what
    `GraphIndex.add_passages` builds from the same passages, taking every vector from the parts. The first part
    is taken whole less its tombstones (nothing to resolve); the later ones are resolved passage by passage."""
    parts = list(parts)
    if len(parts) == 1 and not parts[0][1]:
        return parts[0][0]  # one segment without tombstones is the graph
    ent_ids: dict[str, int] = {}
    ent_names: list[str] = []
    rel_ids: dict[str, int] = {}
    relations: list[Relation] = []
    passages: dict[str, Passage] = {}
    ent_blocks: list[tuple[np.ndarray, np.ndarray | None]] = []  # (a part's matrix, its rows taken; None: all)
    rel_blocks: list[tuple[np.ndarray, np.ndarray | None]] = []
    dim_e = dim_r = 0
    if parts:  # the first part (after a merge: the largest) needs no resolution: taken whole, less its tombstones
        state, dead = parts.pop(0)
        keys, ent_names, relations, passages, keep_ent, keep_rel = _without(state, dead)
        ent_ids = {k: i for i, k in enumerate(keys)}
        rel_ids = {r.key: i for i, r in enumerate(relations)}
        ent_blocks, rel_blocks = [(state.entity_vectors, keep_ent)], [(state.relation_vectors, keep_rel)]
        dim_e, dim_r = (m.shape[1] if m.ndim == 2 else 0 for m in (state.entity_vectors, state.relation_vectors))
    for state, dead in parts:
        dim_e = dim_e or (state.entity_vectors.shape[1] if state.entity_vectors.ndim == 2 else 0)
        dim_r = dim_r or (state.relation_vectors.shape[1] if state.relation_vectors.ndim == 2 else 0)
        ent_rows: list[int] = []  # rows of this part's matrices that are new entities / relations, in order
        rel_rows: list[int] = []
        keys, names = state.entity_keys, state.entity_names

        def entity(e: int) -> int:
            key = keys[e]
            found = ent_ids.get(key)
            if found is None:
                found = ent_ids[key] = len(ent_names)
                ent_names.append(names[e])
                ent_rows.append(e)
            return found

        for pid, p in state.passages.items():
            if pid in dead:
                continue
            if pid in passages:
                raise ValueError(f"passage {pid!r} is live in two graph segments")
            rids: list[int] = []
            for r in p.relations:
                rel = state.relations[r]
                rid = rel_ids.get(rel.key)
                if rid is None:
                    rid = rel_ids[rel.key] = len(relations)
                    relations.append(Relation(rel.key, rel.text, entity(rel.subject), entity(rel.object)))
                    rel_rows.append(r)
                if rid not in rids:
                    rids.append(rid)
                    relations[rid].passages.append(pid)
            passages[pid] = Passage(p.text, rids, dict(p.metadata))
        ent_blocks.append((state.entity_vectors, np.asarray(ent_rows, dtype=np.int64)))
        rel_blocks.append((state.relation_vectors, np.asarray(rel_rows, dtype=np.int64)))
    return GraphState(list(ent_ids), ent_names, relations, passages, _gather(ent_blocks, dim_e),
                      _gather(rel_blocks, dim_r))


def _without(state: GraphState, dead: set[str]) -> tuple[
        list[str], list[str], list[Relation], dict[str, Passage], np.ndarray | None, np.ndarray | None]:
    """The records of `state` without the passages `dead` and the relations and entities only they used (no key is
    looked up), renumbered: entity keys, names, relations, passages, and the rows of the entity and relation vectors
    kept (None: all)."""
    n_rel, n_ent = len(state.relations), len(state.entity_keys)
    live = {pid: p for pid, p in state.passages.items() if pid not in dead}
    if len(live) == len(state.passages):
        relations = [Relation(r.key, r.text, r.subject, r.object, list(r.passages)) for r in state.relations]
        passages = {pid: Passage(p.text, list(p.relations), p.metadata) for pid, p in live.items()}
        return list(state.entity_keys), list(state.entity_names), relations, passages, None, None
    used = np.zeros(n_rel, dtype=bool)
    for p in live.values():
        used[p.relations] = True
    keep_rel = np.flatnonzero(used)
    ends = np.fromiter((e for r in state.relations for e in (r.subject, r.object)), np.int64, 2 * n_rel)
    ent_used = np.zeros(n_ent, dtype=bool)
    ent_used[ends.reshape(-1, 2)[keep_rel].ravel()] = True
    keep_ent = np.flatnonzero(ent_used)
    ent_map = np.full(n_ent, -1, dtype=np.int64)
    ent_map[keep_ent] = np.arange(len(keep_ent))
    rel_map = np.full(n_rel, -1, dtype=np.int64)
    rel_map[keep_rel] = np.arange(len(keep_rel))
    em, rm = ent_map.tolist(), rel_map.tolist()
    touched = {r for pid in dead if pid in state.passages for r in state.passages[pid].relations}
    relations = [Relation(r.key, r.text, em[r.subject], em[r.object],
                          [p for p in r.passages if p not in dead] if i in touched else list(r.passages))
                 for i, r in ((i, state.relations[i]) for i in keep_rel.tolist())]
    passages = {pid: Passage(p.text, [rm[r] for r in p.relations], p.metadata) for pid, p in live.items()}
    ents = keep_ent.tolist()
    return ([state.entity_keys[i] for i in ents], [state.entity_names[i] for i in ents], relations, passages,
            keep_ent, keep_rel)


def _rows(matrix: np.ndarray, rows: list[int]) -> np.ndarray:
    if not rows:
        return np.zeros((0, matrix.shape[1] if matrix.ndim == 2 else 0), dtype=np.float32)
    return np.ascontiguousarray(matrix[np.asarray(rows, dtype=np.int64)], dtype=np.float32)


def _gather(blocks: list[tuple[np.ndarray, np.ndarray | None]], dim: int) -> np.ndarray:
    """The chosen rows of each matrix, stacked, copied once."""
    sizes = [len(m) if rows is None else len(rows) for m, rows in blocks]
    out = np.empty((sum(sizes), dim), dtype=np.float32)
    at = 0
    for (m, rows), n in zip(blocks, sizes):
        if n and rows is None:
            out[at:at + n] = m
        elif n:
            np.take(m.astype(np.float32, copy=False), rows, axis=0, out=out[at:at + n], mode="clip")  # "raise" buffers
        at += n
    return out


def _no_make() -> ChunkIndex:
    raise TypeError("graph segments are made from the view (SegmentedGraphIndex.add / merged)")


class _ReadPart:
    """A graph segment as read from disk, until its graph is merged into the view."""

    def __init__(self, state: GraphState) -> None:
        self.state = state

    def __len__(self) -> int:
        return len(self.state.passages)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self.state.passages

    def chunk_ids(self) -> list[str]:
        return list(self.state.passages)


def _read_part(directory: Path) -> ChunkIndex:
    return _ReadPart(read_graph(directory))  # type: ignore[return-value]


class GraphPart:
    """The passages of one graph segment, as the segment bookkeeping sees them (ids only); saving it writes their
    subgraph from the merged view."""

    def __init__(self, view: GraphIndex, passage_ids: Iterable[str]) -> None:
        self.view = view
        self.ids = list(dict.fromkeys(passage_ids))
        self._set = set(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._set

    def chunk_ids(self) -> list[str]:
        return list(self.ids)

    def add(self, chunks: list[IndexedChunk]) -> None:
        raise TypeError("a graph segment is written through SegmentedGraphIndex.add")

    def delete(self, chunk_ids: list[str]) -> None:
        gone = set(chunk_ids)
        self.ids = [c for c in self.ids if c not in gone]
        self._set -= gone

    def save(self, directory: Path) -> None:
        write_graph(subgraph(self.view, self.ids), directory)


class SegmentedGraphIndex(SegmentedIndex):
    """A graph index kept as segments (see the module docstring); `view` is the `GraphIndex` searches use."""

    tombstones_in_index = False

    def __init__(self, view: GraphIndex, *, policy: MergePolicy | None = None, kb_name: str = "NAME") -> None:
        # module functions, not bound methods: no cycle through self, so a generation's reader lease
        # (`ctxrag.stores.engine.leases`) ends as soon as its objects are dropped

        super().__init__("graph", _no_make, _read_part, policy=policy, kb_name=kb_name)
        self.view = view

    @classmethod
    def empty(cls, embeddings: Embeddings, *, extractor: Callable[[str], Sequence[Any]] | None = None,
              policy: MergePolicy | None = None, kb_name: str = "NAME") -> SegmentedGraphIndex:
        return cls(GraphIndex(embeddings, extractor=extractor, show_progress=False), policy=policy, kb_name=kb_name)

    @classmethod
    def of(cls, graph: GraphIndex, *, policy: MergePolicy | None = None, kb_name: str = "NAME") -> SegmentedGraphIndex:
        """`graph` as a segmented index whose next save writes all of it as one segment."""
        index = cls(graph, policy=policy, kb_name=kb_name)
        index.fresh = GraphPart(graph, graph.chunk_ids())  # type: ignore[assignment]
        return index

    @classmethod
    def load(cls, directory: Path, embeddings: Embeddings, *,
             extractor: Callable[[str], Sequence[Any]] | None = None, policy: MergePolicy | None = None,
             kb_name: str = "NAME") -> SegmentedGraphIndex:
        """Read a generation's graph folder: its ``segments.json`` (checksums verified) or, from before segments, a
        whole ``graph.json``; `IndexCorruptError` names a damaged file."""
        index = cls.empty(embeddings, extractor=extractor, policy=policy, kb_name=kb_name)
        index.load_set(directory)
        graphs = [(s.index.state, s.dead) for s in index.sealed]  # type: ignore[attr-defined]
        index.view = GraphIndex.from_state(union(graphs), embeddings, extractor=extractor, show_progress=False)
        for s in index.sealed:  # the segment graphs are in the view now: keep only their passage ids
            s.index = GraphPart(index.view, s.index.chunk_ids())  # type: ignore[assignment]
        return index

    # -- ChunkIndex: the view and the fresh segment together ---------------------------------------------------
    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self.view

    def __len__(self) -> int:
        return len(self.view)

    def chunk_ids(self) -> list[str]:
        return self.view.chunk_ids()

    def add(self, chunks: list[IndexedChunk]) -> None:
        """Add chunks to the view (triplets from ``metadata["triplets"]`` or the extractor; new entities and relations
        are embedded) and to this commit's segment; a chunk already present is replaced."""
        if not chunks:
            return
        self.view.add(chunks)
        ids = [c.chunk_id for c in chunks]
        self._tombstone(ids)
        added = set(ids)
        fresh = [c for c in self.fresh.chunk_ids() if c not in added] if self.fresh is not None else []
        self.fresh = GraphPart(self.view, fresh + ids)  # type: ignore[assignment]
        self.version += 1

    def delete(self, chunk_ids: list[str]) -> None:
        self.view.delete(chunk_ids)
        if self.fresh is not None:
            self.fresh.delete(chunk_ids)
        self._tombstone(chunk_ids)
        self.version += 1

    def merged(self, parts: list[tuple[ChunkIndex, set[str]]]) -> ChunkIndex:
        live = [c for index, dead in parts for c in index.chunk_ids() if c not in dead]
        return GraphPart(self.view, live)  # type: ignore[return-value]
