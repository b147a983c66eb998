"""Document ids of a BM25 index, by slot (position in the index, across its postings blocks).

Ids are either given by the caller (strings, e.g. chunk ids) or automatic: the running number of the document,
``"0"``, ``"1"``, ... Automatic ids are kept as one int64 array rather than a million Python strings and a dict,
which is most of an index's memory at that size. Caller-given ids are an `IdMap` (slot = its int id): sorted arrays
saved in the index's ``.npz`` plus a small dict of what was added since, so opening a saved index builds no Python
object per document (format version 1 kept them as a JSON list; still read).

>>> keys = DocKeys()
>>> keys.append(None, 3).tolist()
[0, 1, 2]
>>> keys.key(2), keys.slots_of(["1", "7", "x"]).tolist()
('2', [1])
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxrag.errors import ConfigError
from ctxrag.stores.engine.id_map import IdMap

ID_ARRAYS = ("doc_slots", "doc_ids", "doc_order")
"""The arrays caller-given ids are saved as: live slots (ascending), their ids (UTF-8), the order sorting the ids."""


class DocKeys:
    """Slot <-> id mapping; dead slots stay until `compact` drops them (their caller-given ids are forgotten at once)."""

    def __init__(self) -> None:
        self.explicit: bool | None = None
        self._ids = IdMap()
        """Caller-given ids of the live slots (slot = int id)."""
        self._n_slots = 0
        self._shared = False  # `_ids` is another DocKeys's too (see `fork`)
        self._numbers = np.zeros(0, dtype=np.int64)
        self.next_number = 0

    @property
    def n_slots(self) -> int:
        return self._n_slots if self.explicit else len(self._numbers)

    def _own(self) -> IdMap:
        if self._shared:  # forked: copy before the first change (after a save or load that copies no chunk id)
            self._ids, self._shared = self._ids.copy(), False
        return self._ids

    def append(self, ids: Sequence[str] | None, n: int) -> np.ndarray:
        """Give `n` new documents slots at the end; returns the slots. Caller-given ids must not be present (the
        index deletes them first)."""
        self._set_mode(ids is not None)
        start = self.n_slots
        if ids is not None:
            if len(ids) != n:
                raise ValueError(f"got {len(ids)} ids for {n} documents")
            bad = next((key for key in ids if not isinstance(key, str)), None)
            if bad is not None:
                raise ValueError(f"document ids must be strings, got {bad!r}")
            mapping = self._own()
            for offset, key in enumerate(ids):
                mapping.put(key, start + offset)
            self._n_slots += n
        else:
            new = np.arange(self.next_number, self.next_number + n, dtype=np.int64)
            self._numbers = np.concatenate([self._numbers, new])
            self.next_number += n
        return np.arange(start, start + n)

    def _set_mode(self, explicit: bool) -> None:
        if self.explicit is None:
            self.explicit = explicit
        elif self.explicit != explicit:
            raise ConfigError(
                "pass ids for every add or for none: this index has "
                + ("caller-given ids" if self.explicit else "automatic ids")
            )

    def slots_of(self, ids: Sequence[str]) -> np.ndarray:
        """Slots of the ids that are present (live, or for automatic ids not yet compacted); unknown ids are
        skipped."""
        if self.explicit:
            return self._ids.ints([key for key in ids if isinstance(key, str)])
        numbers = np.array([int(key) for key in ids if isinstance(key, str) and key.isdigit()], dtype=np.int64)
        pos = np.searchsorted(self._numbers, numbers)
        ok = pos < len(self._numbers)
        ok[ok] = self._numbers[pos[ok]] == numbers[ok]
        return pos[ok]

    def forget(self, slots: np.ndarray) -> None:
        """Deleted slots no longer resolve by id (auto ids are checked against the live mask instead)."""
        if self.explicit and len(slots):
            mapping = self._own()
            for key in mapping.chunks(slots):
                mapping.pop(key)

    def fork(self) -> DocKeys:
        """A copy to `forget` in (a sealed segment of the next generation: never appended to). The id map is shared
        and copied on the copy's first change only (a saved or loaded map's copy costs its changes, not its ids)."""
        out = DocKeys()
        out.explicit, out._numbers, out.next_number = self.explicit, self._numbers, self.next_number
        out._ids, out._n_slots, out._shared = self._ids, self._n_slots, True
        return out

    def key(self, slot: int) -> str:
        """The id of a live slot."""
        return self.keys(np.array([slot]))[0]

    def keys(self, slots: np.ndarray) -> list[str]:
        """The ids of live slots."""
        if self.explicit:
            return self._ids.chunks(slots)
        return [str(n) for n in self._numbers[slots].tolist()]

    def compact(self, keep: np.ndarray) -> None:
        """Drop the slots where `keep` (the live mask) is False, renumbering the rest."""
        if self.explicit:
            ints, chunks = self._ids.arrays()
            if not np.array_equal(ints, np.flatnonzero(keep)):
                raise ValueError("the ids to keep are not the live ones")
            self._ids, self._shared = IdMap.from_arrays(np.arange(len(ints)), chunks), False
            self._n_slots = len(ints)
        elif self.explicit is False:
            self._numbers = self._numbers[keep]

    # persistence: the mode goes to the JSON manifest; ids to the arrays (`ID_ARRAYS`, or automatic numbers)
    def to_manifest(self) -> dict:
        if self.explicit:
            return {"mode": "arrays"}
        return {"mode": "auto" if self.explicit is False else "empty", "next_number": self.next_number}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays to save. Caller-given ids move into arrays in memory too (so a later `fork` of this index,
        a sealed segment, copies nothing per id)."""
        if self.explicit:
            ints, chunks = self._ids.arrays()
            order = np.argsort(chunks, kind="stable")
            self._ids, self._shared = IdMap.from_arrays(ints, chunks, order), False
            return dict(zip(ID_ARRAYS, (ints, chunks, order)))
        if self.explicit is False:
            return {"doc_numbers": self._numbers}
        return {}

    @staticmethod
    def array_names(manifest: dict) -> list[str]:
        """The arrays `from_manifest` needs, by the manifest's id mode."""
        return {"arrays": list(ID_ARRAYS), "auto": ["doc_numbers"]}.get(manifest.get("mode"), [])

    @classmethod
    def from_manifest(cls, manifest: dict, arrays: dict[str, np.ndarray], live: np.ndarray) -> DocKeys:
        """Ids from the manifest's mode and the arrays `array_names` named (`ValueError` when they disagree)."""
        keys = cls()
        mode = manifest.get("mode")
        if mode == "arrays":
            keys.explicit, keys._n_slots = True, len(live)
            slots, chunks, order = (arrays[name] for name in ID_ARRAYS)
            keys._ids = IdMap.from_arrays(slots, chunks, order)
            if len(slots) != int(live.sum()) or (len(slots) and (int(slots[-1]) >= len(live) or not live[slots].all())):
                raise ValueError(f"{len(slots)} saved ids are not the {int(live.sum())} live documents")
        elif mode == "explicit":  # format version 1: every slot's id in the manifest (one Python object each)
            keys.explicit, keys._n_slots = True, len(live)
            saved = list(manifest["keys"])
            if len(saved) != len(live):
                raise ValueError(f"{len(saved)} ids for {len(live)} documents")
            slots = np.flatnonzero(live)
            keys._ids = IdMap.from_arrays(slots, [saved[s] for s in slots.tolist()])
        elif mode == "auto":
            keys.explicit = False
            keys._numbers = np.array(arrays["doc_numbers"], dtype=np.int64)
            keys.next_number = int(manifest["next_number"])
        elif mode != "empty":
            raise ValueError(f"unknown id mode {mode!r}")
        return keys

    @property
    def numbers(self) -> np.ndarray:
        return self._numbers
