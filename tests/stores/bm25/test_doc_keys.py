"""`DocKeys` with caller-given ids (an `IdMap` by slot) against a plain dict, through adds, forgets, forks, saves
(as `BM25Index.save` writes them) and compaction."""
from __future__ import annotations

import random

import numpy as np
import pytest

from ctxrag.stores.bm25.doc_keys import DocKeys


def _reloaded(keys: DocKeys, live: np.ndarray) -> DocKeys:
    arrays = keys.to_arrays()
    return DocKeys.from_manifest(keys.to_manifest(), arrays, live)


def test_matches_a_dict_through_changes_saves_forks_and_compaction() -> None:
    rng = random.Random(5)
    keys, live, slot_of = DocKeys(), np.zeros(0, dtype=bool), {}
    for step in range(8):
        new = list(dict.fromkeys(f"d{rng.randrange(80)}:{rng.choice(['0', '竹'])}" for _ in range(25)))
        replaced = [slot_of.pop(k) for k in new if k in slot_of]
        keys.forget(np.array(sorted(replaced), dtype=np.int64))
        live[replaced] = False
        slots = keys.append(new, len(new))
        live = np.concatenate([live, np.ones(len(new), dtype=bool)])
        slot_of.update(zip(new, slots.tolist()))
        gone = rng.sample(sorted(slot_of), 6)
        dead = np.array(sorted(slot_of.pop(k) for k in gone), dtype=np.int64)
        keys.forget(dead)
        live[dead] = False
        if step % 3 == 1:
            keys = _reloaded(keys, live)
        if step % 3 == 2:
            keys.compact(live)
            order = sorted(slot_of, key=slot_of.__getitem__)
            slot_of, live = {k: i for i, k in enumerate(order)}, np.ones(len(order), dtype=bool)
        assert keys.n_slots == len(live)
        assert keys.keys(np.flatnonzero(live)) == sorted(slot_of, key=slot_of.__getitem__)
        asked = [*rng.sample(sorted(slot_of), 5), *gone[:2], "never"]
        assert sorted(keys.slots_of(asked).tolist()) == sorted(slot_of[k] for k in asked if k in slot_of)
        fork = keys.fork()  # a sealed segment's copy: forgets on its own, the original is unchanged
        fork.forget(keys.slots_of(asked[:2]))
        assert keys.slots_of(asked[:2]).tolist() and not fork.slots_of(asked[:2]).tolist()


def test_fork_of_a_saved_or_loaded_map_copies_no_id() -> None:
    keys = DocKeys()
    keys.append([f"c{i}" for i in range(1000)], 1000)
    live = np.ones(1000, dtype=bool)
    loaded = _reloaded(keys, live)
    for source in (keys, loaded):  # saving moved the ids into arrays too
        fork = source.fork()
        assert fork._ids is source._ids  # shared until the fork's first change
        fork.forget(np.array([3]))
        assert fork._ids is not source._ids and not fork._ids._added and fork._ids._removed == {3}
        assert source.slots_of(["c3"]).tolist() == [3]


def test_version_1_manifest_keys() -> None:
    live = np.array([False, True, True])
    keys = DocKeys.from_manifest({"mode": "explicit", "keys": ["a", "b", "a"]}, {}, live)
    assert keys.keys(np.array([1, 2])) == ["b", "a"] and keys.slots_of(["a", "b"]).tolist() == [2, 1]
    with pytest.raises(ValueError, match="2 ids for 3 documents"):
        DocKeys.from_manifest({"mode": "explicit", "keys": ["a", "b"]}, {}, live)
