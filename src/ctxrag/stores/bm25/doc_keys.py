"""Document ids of a BM25 index, by slot (position in the index's segments).

Ids are either given by the caller (strings, e.g. chunk ids) or automatic: the running number of the document,
``"0"``, ``"1"``, ... Automatic ids are kept as one int64 array rather than a million Python strings and a dict,
which is most of an index's memory at that size.

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


class DocKeys:
    """Slot <-> id mapping; dead slots stay until `compact` drops them."""

    def __init__(self) -> None:
        self.explicit: bool | None = None
        self._keys: list[str] = []
        self._slot_of: dict[str, int] = {}
        self._shared = False  # `_slot_of` is another DocKeys's too (see `fork`)
        self._numbers = np.zeros(0, dtype=np.int64)
        self.next_number = 0

    @property
    def n_slots(self) -> int:
        return len(self._keys) if self.explicit else len(self._numbers)

    def append(self, ids: Sequence[str] | None, n: int) -> np.ndarray:
        """Give `n` new documents slots at the end; returns the slots."""
        self._set_mode(ids is not None)
        start = self.n_slots
        if ids is not None:
            if self._shared:
                self._keys, self._slot_of, self._shared = list(self._keys), dict(self._slot_of), False
            if len(ids) != n:
                raise ValueError(f"got {len(ids)} ids for {n} documents")
            for offset, key in enumerate(ids):
                if not isinstance(key, str):
                    raise ValueError(f"document ids must be strings, got {key!r}")
                self._slot_of[key] = start + offset
            self._keys.extend(ids)
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
        """Slots of the ids that are present (live or not yet compacted); unknown ids are skipped."""
        if self.explicit:
            found = [self._slot_of[key] for key in ids if key in self._slot_of]
            return np.array(found, dtype=np.int64)
        numbers = np.array([int(key) for key in ids if isinstance(key, str) and key.isdigit()], dtype=np.int64)
        pos = np.searchsorted(self._numbers, numbers)
        ok = pos < len(self._numbers)
        ok[ok] = self._numbers[pos[ok]] == numbers[ok]
        return pos[ok]

    def forget(self, slots: np.ndarray) -> None:
        """Deleted slots no longer resolve by id (auto ids are checked against the live mask instead)."""
        if self.explicit:
            if self._shared:  # forked: copy before the first change (most commits never delete from a segment)
                self._slot_of, self._shared = dict(self._slot_of), False
            for slot in slots.tolist():
                self._slot_of.pop(self._keys[slot], None)

    def fork(self) -> DocKeys:
        """A copy to `forget` in (a sealed segment of the next generation: never appended to). The id list and dict
        are shared; the dict is copied on the copy's first `forget` only."""
        out = DocKeys()
        out.explicit, out._keys, out._numbers, out.next_number = self.explicit, self._keys, self._numbers, self.next_number
        out._slot_of, out._shared = self._slot_of, True
        return out

    def key(self, slot: int) -> str:
        return self._keys[slot] if self.explicit else str(int(self._numbers[slot]))

    def keys(self, slots: np.ndarray) -> list[str]:
        if self.explicit:
            return [self._keys[s] for s in slots.tolist()]
        return [str(n) for n in self._numbers[slots].tolist()]

    def compact(self, keep: np.ndarray) -> None:
        if self.explicit:
            self._keys = [k for k, alive in zip(self._keys, keep.tolist()) if alive]
            self._slot_of = {k: i for i, k in enumerate(self._keys)}
        elif self.explicit is False:
            self._numbers = self._numbers[keep]

    # persistence: explicit ids go to the JSON manifest, automatic ones to the arrays
    def to_manifest(self) -> dict:
        if self.explicit:
            return {"mode": "explicit", "keys": self._keys}
        return {"mode": "auto" if self.explicit is False else "empty", "next_number": self.next_number}

    @classmethod
    def from_manifest(cls, manifest: dict, numbers: np.ndarray | None, live: np.ndarray) -> DocKeys:
        keys = cls()
        mode = manifest.get("mode")
        if mode == "explicit":
            keys.explicit = True
            keys._keys = list(manifest["keys"])
            keys._slot_of = {k: i for i, k in enumerate(keys._keys) if live[i]}
        elif mode == "auto":
            keys.explicit = False
            keys._numbers = np.array(numbers, dtype=np.int64)
            keys.next_number = int(manifest["next_number"])
        elif mode != "empty":
            raise ValueError(f"unknown id mode {mode!r}")
        return keys

    @property
    def numbers(self) -> np.ndarray:
        return self._numbers
