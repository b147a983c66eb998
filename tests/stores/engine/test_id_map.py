"""`IdMap` against the two dicts it replaces, through saves, loads, adds and removes."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from ctxrag.stores.engine.id_map import IdMap


def test_empty_map() -> None:
    ids = IdMap()
    assert len(ids) == 0 and "a" not in ids and ids.get("a") is None and ids.chunk(0) is None
    assert ids.chunk_ids() == [] and ids.int_ids().tolist() == [] and ids.ints(["a"]).tolist() == []
    assert ids.pop("a") is None


def test_matches_dicts_through_saves_and_changes(tmp_path: Path) -> None:
    rng = random.Random(3)
    ids, int_of, next_id = IdMap(), {}, 0
    for step in range(6):
        for _ in range(40):  # adds (re-adds get a new int id, at the end), then removes
            c = f"doc{rng.randrange(60)}:{rng.choice(['0', '1', '竹'])}"
            if c in int_of:
                assert ids.pop(c) == int_of.pop(c)
            ids.put(c, next_id)
            int_of[c] = next_id
            next_id += 1
        for c in rng.sample(sorted(int_of), 10):
            assert ids.pop(c) == int_of.pop(c)
        assert ids.pop("never") is None
        chunk_of = {i: c for c, i in int_of.items()}
        assert len(ids) == len(int_of) and ids.chunk_ids() == list(int_of)
        assert ids.int_ids().tolist() == list(int_of.values())
        for c in [*int_of, "doc999:0", ""]:
            assert ids.get(c) == int_of.get(c) and (c in ids) == (c in int_of)
        for i in range(next_id + 2):
            assert ids.chunk(i) == chunk_of.get(i)
        some_ints = rng.sample(sorted(chunk_of), 8)
        assert ids.chunks(np.array(some_ints)) == [chunk_of[i] for i in some_ints]
        removed = next((i for i in range(next_id) if i not in chunk_of), None)
        if removed is not None:
            with pytest.raises(KeyError, match=f"int id {removed} "):
                ids.chunks([removed])
        some = [*rng.sample(sorted(int_of), 5), "missing"]
        assert sorted(ids.ints(some).tolist()) == sorted(int_of[c] for c in some if c in int_of)
        if step % 2:  # a saved map, loaded: lookups go through the sorted arrays
            ids.save(tmp_path / "ids.npz")
            ids = IdMap.load(tmp_path / "ids.npz")


def test_from_arrays_names_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="2 int ids but 1 chunk ids"):
        IdMap.from_arrays([0, 1], ["a"])
    with pytest.raises(ValueError, match="not ascending"):
        IdMap.from_arrays([1, 0], ["a", "b"])
    with pytest.raises(ValueError, match="not unique"):
        IdMap.from_arrays(np.array([0, 1]), ["a", "a"])


def test_removed_ids_are_sorted_once_per_change_not_per_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment with tombstones answers each query's page of results without sorting its removed ids again."""
    ids = IdMap.from_arrays(np.arange(1000), [f"c{i:04d}" for i in range(1000)])
    for i in range(0, 1000, 7):
        ids.pop(f"c{i:04d}")
    sorts = []
    real_sort = np.sort
    monkeypatch.setattr(np, "sort", lambda a, *args, **kw: sorts.append(len(a)) or real_sort(a, *args, **kw))
    page = np.array([1, 2, 3, 5, 8, 13])
    for _ in range(5):  # five queries
        assert ids.chunks(page) == [f"c{i:04d}" for i in page]
        assert ids.ints(["c0001", "c0007", "c0014", "c0015"]).tolist() == [1, 15]
    assert sorts == [143]  # once, at the first lookup after the removes
    ids.pop("c0001")
    assert ids.ints(["c0001", "c0002"]).tolist() == [2] and sorts == [143, 144]
    copy = ids.copy()
    copy.pop("c0002")
    assert ids.ints(["c0002"]).tolist() == [2] and copy.ints(["c0002"]).tolist() == []
    with pytest.raises(KeyError, match="int id 7 "):
        ids.chunks([7])
    assert 7 not in ids.int_ids().tolist() and len(ids.int_ids()) == len(ids)
