"""ChromaIndex on a real persistent Chroma collection with hand-made 2-d vectors: exact cosine order, replace, delete,
allowed ids, vectors for MMR, fingerprints, the generation marker, reopen, and the error paths."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("chromadb", reason="chromadb is not installed (pip install 'ctxrag[chroma]')")

from ctxrag.stores.engine.external import BACKEND_FILE, text_fingerprint  # noqa: E402
from ctxrag.stores.base import IndexedChunk  # noqa: E402
from ctxrag.stores.vectors.chroma import ChromaIndex  # noqa: E402

from angled_vectors import ANGLES  # noqa: E402
from angled_vectors import chunk as _chunk  # noqa: E402
from angled_vectors import vec as _vec  # noqa: E402


@pytest.fixture
def index(tmp_path: Path):
    idx = ChromaIndex(tmp_path / "chroma")
    idx.add([_chunk(f"{n}:0", deg) for n, deg in ANGLES.items()])
    yield idx
    idx.close()


def test_search_is_exact_cosine_in_order(index: ChromaIndex) -> None:
    hits = index.search(_vec(0), k=4)
    assert [c for c, _ in hits] == ["a:0", "b:0", "c:0", "d:0"]
    for cid, cos in hits:
        assert cos == pytest.approx(np.cos(np.deg2rad(ANGLES[cid[0]])), abs=1e-5)
    assert hits[-1][1] == pytest.approx(-1.0, abs=1e-5)  # opposite vector: cosine -1, not clipped
    assert len(index.search(_vec(0), k=100)) == 4  # k beyond the collection size is fine


def test_allowed_ids_restrict_candidates(index: ChromaIndex) -> None:
    assert [c for c, _ in index.search(_vec(0), k=3, allowed_chunk_ids={"c:0", "d:0", "zz:0"})] == ["c:0", "d:0"]
    assert index.search(_vec(0), k=3, allowed_chunk_ids=set()) == []


def test_add_replaces_and_delete_removes(index: ChromaIndex) -> None:
    index.add([_chunk("d:0", 5, "new text")])  # same id, new vector: replaced, not duplicated
    assert len(index) == 4
    assert index.search(_vec(0), k=1)[0][0] == "d:0"
    assert index.fingerprints()["d:0"] == text_fingerprint("new text")
    index.delete(["a:0", "unknown:1"])
    assert len(index) == 3 and "a:0" not in index and "b:0" in index
    assert "a:0" not in [c for c, _ in index.search(_vec(0), k=4)]


def test_vectors_in_given_order(index: ChromaIndex) -> None:
    v = index.vectors(["c:0", "a:0"])
    np.testing.assert_allclose(v, np.stack([_vec(80), _vec(10)]), atol=1e-6)
    with pytest.raises(KeyError, match="nope:0"):
        index.vectors(["a:0", "nope:0"])


def test_save_marker_and_reopen(index: ChromaIndex, tmp_path: Path) -> None:
    gen = tmp_path / "gen" / "dense"
    index.save(gen)
    info = json.loads((gen / BACKEND_FILE).read_text(encoding="utf-8"))
    assert info["backend"] == "chroma" and info["count"] == 4
    index.close()
    again = ChromaIndex(tmp_path / "chroma")
    try:
        assert len(again) == 4
        assert [c for c, _ in again.search(_vec(0), k=2)] == ["a:0", "b:0"]
        assert set(again.fingerprints()) == {f"{n}:0" for n in ANGLES}
    finally:
        again.close()


def test_errors(index: ChromaIndex) -> None:
    with pytest.raises(ValueError, match="without a vector"):
        index.add([IndexedChunk("x:0", "x", "t", "t")])
    with pytest.raises(ValueError, match="k must be positive"):
        index.search(_vec(0), k=0)


def test_empty_collection(tmp_path: Path) -> None:
    idx = ChromaIndex(tmp_path / "empty")
    try:
        assert len(idx) == 0 and idx.search(_vec(0), k=3) == [] and idx.fingerprints() == {}
        idx.delete(["nothing:0"])  # unknown ids are ignored
    finally:
        idx.close()
