"""`kb check` / `kb repair` on the self-persisting backends: a Chroma or Milvus Lite store that lost a vector or holds
one the document store does not is listed as it is (before the reconciliation that opening it runs), and repair
brings it back in step. `fake` embeddings."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ctxrag.kb.maintenance import check, repair
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, Settings
from ctxrag.stores.vectors.backends import open_unreconciled
from ctxrag.stores.base import IndexedChunk

_NEEDS = {"chroma": "chromadb", "milvus": "milvus_lite"}
BACKENDS = [pytest.param(b, marks=pytest.mark.skipif(importlib.util.find_spec(m) is None, reason=f"{m} missing"))
            for b, m in _NEEDS.items()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_lists_backend_differences_and_repair_fixes_them(tmp_path: Path, backend: str) -> None:
    settings = Settings(home=tmp_path / "home", dense_backend=backend, embeddings=EmbeddingSettings(provider="fake"))
    kb = KnowledgeBase.open("chk", settings)
    kb.add_texts([{"text": f"Text number {i} about the {w}.", "source": f"mem://{w}"}
                  for i, w in enumerate(["heron", "egret", "ibis"])])
    assert check(kb).clean
    lost = kb.search("Text number 1 about the egret.", k=1)[0].id
    kb.close()
    raw = open_unreconciled(kb.settings, kb.name, kb.root)
    assert raw is not None
    raw.delete([lost])
    dim = len(next(iter(raw.vectors([c for c in raw.fingerprints() if c != lost][:1]))))
    raw.add([IndexedChunk("ghost:0", "ghost", "ghost", "ghost", vector=np.eye(dim, dtype=np.float32)[0])])
    raw.close()
    kb = KnowledgeBase.open("chk", settings)
    report = check(kb)
    dense = next(d for d in report.differences if d.index == "dense")
    assert dense.missing == [lost] and dense.extra == ["ghost:0"] and not report.clean
    repaired = repair(kb)
    assert repaired.actions["dense"] == "reconciled: removed 1 chunks not stored, re-added 1"
    assert check(kb).clean
    assert kb.search("Text number 1 about the egret.", k=1)[0].id == lost
    kb.close()
