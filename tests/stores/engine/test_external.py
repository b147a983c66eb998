"""`reconcile` takes the committed chunks and an embed function (never the knowledge base): on a real Chroma
collection it deletes ids the chunks lack, re-embeds a chunk stored for another text, adds a missing one, and leaves
an in-step store alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("chromadb", reason="chromadb is not installed (pip install 'ctxrag[chroma]')")

from ctxrag.stores.vectors.chroma import ChromaIndex  # noqa: E402
from ctxrag.stores.documents.docstore import ChunkRecord  # noqa: E402
from ctxrag.stores.engine.external import reconcile, text_fingerprint  # noqa: E402

from angled_vectors import chunk as _chunk  # noqa: E402
from angled_vectors import vec as _vec  # noqa: E402


def _record(cid: str, text: str) -> ChunkRecord:
    return ChunkRecord(cid, cid.split(":")[0], 0, text, text, None, {})


def test_reconcile_brings_the_store_in_step_with_the_chunks(tmp_path: Path) -> None:
    index = ChromaIndex(tmp_path / "chroma")
    try:
        index.add([_chunk("a:0", 10), _chunk("ghost:0", 20), _chunk("b:0", 30, text="old text")])
        committed = [_record("a:0", "text a:0"), _record("b:0", "new text"), _record("c:0", "text c:0")]
        embedded: list[list[str]] = []

        def embed(texts: list[str]) -> np.ndarray:
            embedded.append(texts)
            return np.stack([_vec(90) for _ in texts])

        report = reconcile(index, iter(committed), embed, kb_name="demo")
        assert report.removed == ["ghost:0"] and sorted(report.added) == ["b:0", "c:0"] and report.changed
        assert embedded == [["new text", "text c:0"]]  # only the stale and the missing chunk are embedded
        assert index.fingerprints() == {r.chunk_id: text_fingerprint(r.indexed_text) for r in committed}
        assert index.search(_vec(90), k=2)[0][0] in {"b:0", "c:0"}

        again = reconcile(index, committed, lambda texts: pytest.fail("nothing to embed"))  # type: ignore[arg-type]
        assert not again.changed
    finally:
        index.close()
