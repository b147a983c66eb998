"""Hand-made 2-d unit vectors at known angles, shared by the backend unit tests (query at 0 degrees)."""
from __future__ import annotations

import numpy as np

from ctxrag.stores.base import IndexedChunk

ANGLES = {"a": 10, "b": 40, "c": 80, "d": 180}


def vec(deg: float) -> np.ndarray:
    r = np.deg2rad(deg)
    return np.array([np.cos(r), np.sin(r)], dtype=np.float32)


def chunk(cid: str, deg: float, text: str | None = None) -> IndexedChunk:
    return IndexedChunk(cid, cid.split(":")[0], text or f"text {cid}", text or f"text {cid}", vector=vec(deg))
