"""`GraphIndex`: the knowledge graph of a knowledge base for Graph RAG (Milvus's method, on our own stores).

Three kinds of record: entities (normalised names), relations (a triplet as the sentence ``"subject predicate
object"``) and passages (chunks), linked by the entity->relations map (the sparse incidence matrix, entities x
relations) and the relation->passages map. Entity and relation embeddings are unit float32 numpy matrices searched by
inner product. Persisted as JSON + .npz (no pickle; `ctxrag.stores.graph.persistence`); updated in place by
`add_passages` / `delete_passages`.

It is also a `ChunkIndex` (name ``"graph"``): `add` takes triplets from ``IndexedChunk.metadata["triplets"]`` or,
when absent, from the injected `extractor` (e.g. `TripletExtractor`).

Example::

    from ctxrag.stores.graph import GraphIndex
    from ctxrag.models.embeddings import make_embeddings
    g = GraphIndex(make_embeddings())
    g.add_passages([("p1", "Euler studied under Johann Bernoulli.", [("Leonhard Euler", "student of", "Johann Bernoulli")])])
    g.save(Path("/tmp/graph")); g2 = GraphIndex.load(Path("/tmp/graph"), make_embeddings())
    g2.n_entities, g2.n_relations, len(g2)      # 2, 1, 1
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from langchain_core.embeddings import Embeddings
from tqdm.auto import tqdm

from ctxrag.errors import ConfigError
from ctxrag.models.embeddings import embed_array
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.graph.mentions import cjk_entity_keys, find_entity_mentions
from ctxrag.stores.graph.normalize import clean_text, entity_key, relation_key, relation_text
from ctxrag.stores.graph.persistence import read_graph, write_graph
from ctxrag.stores.graph.records import GraphState
from ctxrag.stores.graph.records import Passage as _Passage
from ctxrag.stores.graph.records import Relation as _Relation
from ctxrag.stores.graph.triplet import coerce_triplets

log = logging.getLogger(__name__)

TRIPLETS_KEY = "triplets"
"""`IndexedChunk.metadata` key holding a chunk's triplets for `GraphIndex.add`."""

_EMBED_BATCH = 256


class GraphIndex:
    """Entities, relations and passages of a knowledge graph, with embeddings and the sparse incidence matrix."""

    name = "graph"

    def __init__(
        self,
        embeddings: Embeddings,
        *,
        extractor: Callable[[str], Sequence[Any]] | None = None,
        show_progress: bool = True,
    ) -> None:
        self.embeddings = embeddings
        self.extractor = extractor
        self.show_progress = show_progress
        self._entity_keys: list[str] = []
        self._entity_names: list[str] = []
        self._entity_ids: dict[str, int] = {}
        self._relations: list[_Relation] = []
        self._relation_ids: dict[str, int] = {}
        self._passages: dict[str, _Passage] = {}
        self._entity_vectors = np.zeros((0, 0), dtype=np.float32)
        self._relation_vectors = np.zeros((0, 0), dtype=np.float32)
        self._incidence: sp.csr_matrix | None = None
        self._cjk_keys: list[tuple[str, int]] | None = None
        self.derived: dict[Any, Any] = {}
        """Structures computed from the graph (e.g. the PageRank walk graph), cleared on every change."""

    # ---- sizes and lookups -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._passages)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._passages

    @property
    def n_entities(self) -> int:
        return len(self._entity_keys)

    @property
    def n_relations(self) -> int:
        return len(self._relations)

    @property
    def passage_ids(self) -> list[str]:
        return list(self._passages)

    def chunk_ids(self) -> list[str]:
        """The passages' chunk ids (`ChunkIndex`)."""
        return list(self._passages)

    def entity_name(self, entity_id: int) -> str:
        return self._entity_names[entity_id]

    def entity_id(self, name: str) -> int | None:
        """Id of the entity whose normalised name equals `name`'s, or None."""
        return self._entity_ids.get(entity_key(name))

    def relation_text(self, relation_id: int) -> str:
        return self._relations[relation_id].text

    def relation_entities(self, relation_id: int) -> tuple[int, int]:
        rel = self._relations[relation_id]
        return rel.subject, rel.object

    def relation_passages(self, relation_id: int) -> list[str]:
        """Passages the relation was extracted from, in the order they were added."""
        return list(self._relations[relation_id].passages)

    def entity_relations(self, entity_id: int) -> list[int]:
        """Relations whose subject or object is the entity (a row of the incidence matrix)."""
        row = self.incidence.getrow(entity_id)
        return sorted(int(i) for i in row.indices)

    def passage_text(self, passage_id: str) -> str:
        return self._passages[passage_id].text

    def passage_metadata(self, passage_id: str) -> dict[str, Any]:
        return dict(self._passages[passage_id].metadata)

    def passage_relations(self, passage_id: str) -> list[int]:
        return list(self._passages[passage_id].relations)

    @property
    def incidence(self) -> sp.csr_matrix:
        """Entity-relation incidence matrix (entities x relations, float32 0/1), rebuilt after each change."""
        if self._incidence is None:
            self._incidence = self.state().incidence()
        return self._incidence

    @property
    def entity_vectors(self) -> np.ndarray:
        return self._entity_vectors

    @property
    def relation_vectors(self) -> np.ndarray:
        return self._relation_vectors

    # ---- search ------------------------------------------------------------------------------------------------
    @staticmethod
    def _top(matrix: np.ndarray, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        if k < 1 or matrix.shape[0] == 0:
            return []
        scores = matrix @ np.asarray(vector, dtype=np.float32).reshape(-1)
        k = min(k, scores.size)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(i), float(scores[i])) for i in top]

    def search_entities(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The `k` entities most similar to `vector` (unit), as ``(entity_id, cosine)``, best first."""
        return self._top(self._entity_vectors, vector, k)

    def search_relations(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The `k` relations most similar to `vector` (unit), as ``(relation_id, cosine)``, best first."""
        return self._top(self._relation_vectors, vector, k)

    def relation_similarity(self, vector: np.ndarray, relation_ids: Sequence[int]) -> np.ndarray:
        """Cosine of `vector` with each of `relation_ids`."""
        if not len(relation_ids):
            return np.zeros(0, dtype=np.float32)
        return self._relation_vectors[np.asarray(relation_ids, dtype=np.int64)] @ np.asarray(vector, dtype=np.float32)

    def find_entity_mentions(self, text: str) -> list[str]:
        """Entity mentions in `text` without an LLM (see `ctxrag.stores.graph.mentions.find_entity_mentions`)."""
        return find_entity_mentions(text, self._entity_ids, self._entity_names, self._cjk_entity_keys)

    def _cjk_entity_keys(self) -> list[tuple[str, int]]:
        if self._cjk_keys is None:
            self._cjk_keys = cjk_entity_keys(self._entity_ids)
        return self._cjk_keys

    # ---- updates -----------------------------------------------------------------------------------------------
    def _embed(self, texts: list[str], what: str) -> np.ndarray:
        parts = []
        bar = tqdm(total=len(texts), desc=f"embedding {what}", disable=not self.show_progress or len(texts) < _EMBED_BATCH)
        for start in range(0, len(texts), _EMBED_BATCH):
            parts.append(embed_array(self.embeddings, texts[start : start + _EMBED_BATCH]))
            bar.update(len(parts[-1]))
        bar.close()
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, 0), dtype=np.float32)

    @staticmethod
    def _append(matrix: np.ndarray, new: np.ndarray) -> np.ndarray:
        if new.shape[0] == 0:
            return matrix
        if matrix.shape[0] == 0:
            return new
        if matrix.shape[1] != new.shape[1]:
            raise ConfigError(f"embedding dimension changed: index has {matrix.shape[1]}, model gives {new.shape[1]}")
        return np.concatenate([matrix, new])

    def add_passages(
        self,
        passages: Iterable[tuple[str, str, Iterable[Any]]],
        metadata: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Add ``(passage_id, text, triplets)`` items; a passage id already present is replaced.

        Triplets are `Triplet`s, 3-item lists or subject/predicate/object dicts; malformed ones are skipped with a
        warning. New entities and relations are embedded (documents side) in batches.
        """
        items = list(passages)
        if metadata is not None and len(metadata) != len(items):
            raise ValueError(f"metadata has {len(metadata)} entries for {len(items)} passages")
        ids = [pid for pid, _, _ in items]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate passage ids in one add: {sorted({i for i in ids if ids.count(i) > 1})[:5]}")
        self.delete_passages([pid for pid in ids if pid in self._passages])

        new_entities: list[tuple[str, str]] = []
        new_relations: list[_Relation] = []
        pending_entities: dict[str, int] = {}
        pending_relations: dict[str, int] = {}

        def entity(name: str) -> int:
            k = entity_key(name)
            if k in self._entity_ids:
                return self._entity_ids[k]
            if k not in pending_entities:
                pending_entities[k] = self.n_entities + len(new_entities)
                new_entities.append((k, clean_text(name)))
            return pending_entities[k]

        for n, (pid, text, triplets) in enumerate(items):
            if not isinstance(pid, str) or not pid:
                raise ValueError(f"passage id must be a non-empty str, got {pid!r}")
            rel_ids: list[int] = []
            for t in coerce_triplets(triplets, where=f"passage {pid!r}"):
                rk = relation_key(*t)
                if rk in self._relation_ids:
                    rid = self._relation_ids[rk]
                elif rk in pending_relations:
                    rid = pending_relations[rk]
                else:
                    rid = self.n_relations + len(new_relations)
                    pending_relations[rk] = rid
                    new_relations.append(_Relation(rk, relation_text(*t), entity(t.subject), entity(t.object)))
                if rid not in rel_ids:
                    rel_ids.append(rid)
            meta = dict(metadata[n]) if metadata is not None else {}
            meta.pop(TRIPLETS_KEY, None)
            self._passages[pid] = _Passage(text=text, relations=rel_ids, metadata=meta)

        ent_vecs = self._embed([name for _, name in new_entities], "entities")
        rel_vecs = self._embed([r.text for r in new_relations], "relations")
        self._entity_vectors = self._append(self._entity_vectors, ent_vecs)
        self._relation_vectors = self._append(self._relation_vectors, rel_vecs)
        for k, name in new_entities:
            self._entity_ids[k] = len(self._entity_keys)
            self._entity_keys.append(k)
            self._entity_names.append(name)
        for rel in new_relations:
            self._relation_ids[rel.key] = len(self._relations)
            self._relations.append(rel)
        for pid, _, _ in items:
            for rid in self._passages[pid].relations:
                self._relations[rid].passages.append(pid)
        self._changed()

    def delete_passages(self, passage_ids: Iterable[str]) -> None:
        """Remove passages; relations left without a passage and entities left without a relation go too."""
        gone = [pid for pid in dict.fromkeys(passage_ids) if pid in self._passages]
        if not gone:
            return
        gone_set = set(gone)
        for pid in gone:
            for rid in self._passages.pop(pid).relations:
                rel = self._relations[rid]
                rel.passages = [p for p in rel.passages if p not in gone_set]
        keep_rel = [i for i, r in enumerate(self._relations) if r.passages]
        keep_ent = sorted({e for i in keep_rel for e in self.relation_entities(i)})
        ent_map = {old: new for new, old in enumerate(keep_ent)}
        rel_map = {old: new for new, old in enumerate(keep_rel)}
        relations = []
        for old in keep_rel:
            r = self._relations[old]
            relations.append(_Relation(r.key, r.text, ent_map[r.subject], ent_map[r.object], r.passages))
        self._relations = relations
        self._relation_ids = {r.key: i for i, r in enumerate(relations)}
        self._entity_keys = [self._entity_keys[i] for i in keep_ent]
        self._entity_names = [self._entity_names[i] for i in keep_ent]
        self._entity_ids = {k: i for i, k in enumerate(self._entity_keys)}
        if self._entity_vectors.shape[0]:
            self._entity_vectors = self._entity_vectors[np.asarray(keep_ent, dtype=np.int64)]
        if self._relation_vectors.shape[0]:
            self._relation_vectors = self._relation_vectors[np.asarray(keep_rel, dtype=np.int64)]
        for p in self._passages.values():
            p.relations = [rel_map[r] for r in p.relations]
        self._changed()

    def _changed(self) -> None:
        self._incidence = None
        self._cjk_keys = None
        self.derived.clear()

    # ---- ChunkIndex protocol -----------------------------------------------------------------------------------
    def add(self, chunks: list[IndexedChunk]) -> None:
        """Add chunks, their triplets taken from ``metadata["triplets"]`` or extracted from ``chunk.text``."""
        items = []
        for chunk in chunks:
            triplets = chunk.metadata.get(TRIPLETS_KEY)
            if triplets is None:
                if self.extractor is None:
                    raise ConfigError(
                        f"chunk {chunk.chunk_id!r} has no metadata['triplets'] and this GraphIndex has no extractor; "
                        "pass extractor=TripletExtractor(llm) or provide triplets"
                    )
                triplets = self.extractor(chunk.text)
            items.append((chunk.chunk_id, chunk.content, triplets))
        self.add_passages(items, metadata=[{**c.metadata, "doc_id": c.doc_id} for c in chunks])

    def delete(self, chunk_ids: list[str]) -> None:
        self.delete_passages(chunk_ids)

    # ---- persistence (ctxrag.stores.graph.persistence) --------------------------------------------------------
    def state(self) -> GraphState:
        """The graph as plain data (shared with the index, not copied: do not change it)."""
        return GraphState(self._entity_keys, self._entity_names, self._relations, self._passages,
                          self._entity_vectors, self._relation_vectors)

    @classmethod
    def from_state(
        cls, state: GraphState, embeddings: Embeddings, *, extractor: Callable[[str], Sequence[Any]] | None = None,
        show_progress: bool = True,
    ) -> GraphIndex:
        """An index holding `state` (e.g. read by `ctxrag.stores.graph.persistence.read_graph`)."""
        index = cls(embeddings, extractor=extractor, show_progress=show_progress)
        index._entity_keys, index._entity_names = list(state.entity_keys), list(state.entity_names)
        index._relations, index._passages = list(state.relations), dict(state.passages)
        index._entity_vectors, index._relation_vectors = state.entity_vectors, state.relation_vectors
        index._entity_ids = {k: i for i, k in enumerate(index._entity_keys)}
        index._relation_ids = {r.key: i for i, r in enumerate(index._relations)}
        return index

    def save(self, directory: Path) -> None:
        """Write ``graph.json``, ``vectors.npz`` and ``incidence.npz`` into `directory`."""
        write_graph(self.state(), directory)

    @classmethod
    def load(
        cls,
        directory: Path,
        embeddings: Embeddings,
        *,
        extractor: Callable[[str], Sequence[Any]] | None = None,
        show_progress: bool = True,
    ) -> GraphIndex:
        """Read an index written by `save`; raises `IndexCorruptError` naming the file when anything is off."""
        return cls.from_state(read_graph(directory), embeddings, extractor=extractor, show_progress=show_progress)
