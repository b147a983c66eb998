"""Reading and writing a graph (`GraphState`) as ``graph.json`` + ``vectors.npz`` + ``incidence.npz`` (no pickle); a
damaged or inconsistent folder raises `IndexCorruptError` naming the file.

Example::

    from ctxrag.stores.graph import GraphIndex
    g = GraphIndex.load(Path("/tmp/graph"), make_embeddings())     # GraphIndex.save / load call these
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ctxrag.errors import IndexCorruptError
from ctxrag.stores.graph.records import FORMAT, VERSION, GraphState, Passage, Relation


def write_graph(state: GraphState, directory: Path) -> None:
    """Write `state` into `directory` (created when missing)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "entities": [[k, n] for k, n in zip(state.entity_keys, state.entity_names)],
        "relations": [[r.key, r.text, r.subject, r.object, r.passages] for r in state.relations],
        "passages": {pid: {"text": p.text, "relations": p.relations, "metadata": p.metadata}
                     for pid, p in state.passages.items()},
    }
    (directory / "graph.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    np.savez(directory / "vectors.npz", entities=state.entity_vectors, relations=state.relation_vectors)
    sp.save_npz(directory / "incidence.npz", state.incidence(), compressed=True)


def read_graph(directory: Path) -> GraphState:
    """The graph written into `directory` by `write_graph`, its parts checked to agree."""
    directory = Path(directory)
    path = directory / "graph.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != FORMAT or doc.get("version") != VERSION:
            raise IndexCorruptError(f"{path}: not a {FORMAT} v{VERSION} file")
        entity_keys = [k for k, _ in doc["entities"]]
        entity_names = [n for _, n in doc["entities"]]
        relations = [Relation(k, t, int(s), int(o), list(ps)) for k, t, s, o, ps in doc["relations"]]
        passages = {
            pid: Passage(p["text"], [int(r) for r in p["relations"]], dict(p["metadata"]))
            for pid, p in doc["passages"].items()
        }
    except IndexCorruptError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IndexCorruptError(f"{path}: {type(exc).__name__}: {exc}") from exc
    vec_path = directory / "vectors.npz"
    try:
        with np.load(vec_path, allow_pickle=False) as z:
            entity_vectors = np.asarray(z["entities"], dtype=np.float32)
            relation_vectors = np.asarray(z["relations"], dtype=np.float32)
        stored = sp.load_npz(directory / "incidence.npz").tocsr()
    except (OSError, ValueError, KeyError) as exc:
        raise IndexCorruptError(f"{directory}: vectors.npz/incidence.npz unreadable: {exc}") from exc
    state = GraphState(entity_keys, entity_names, relations, passages, entity_vectors, relation_vectors)
    n_e, n_r = len(entity_keys), len(relations)
    problems = []
    if entity_vectors.shape[0] != n_e:
        problems.append(f"{entity_vectors.shape[0]} entity vectors for {n_e} entities")
    if relation_vectors.shape[0] != n_r:
        problems.append(f"{relation_vectors.shape[0]} relation vectors for {n_r} relations")
    if any(not (0 <= r.subject < n_e and 0 <= r.object < n_e) for r in relations):
        problems.append("a relation points at an unknown entity")
    if any(not 0 <= rid < n_r for p in passages.values() for rid in p.relations):
        problems.append("a passage points at an unknown relation")
    if not problems and (stored.shape != (n_e, n_r) or (stored != state.incidence()).nnz):
        problems.append(f"incidence.npz {stored.shape} does not match the relations ({n_e}, {n_r})")
    if problems:
        raise IndexCorruptError(f"{directory}: " + "; ".join(problems))
    return state
