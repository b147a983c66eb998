"""MilvusIndex on real Milvus Lite (a local file) with hand-made 2-d vectors: exact cosine order, replace, delete,
allowed ids, vectors for MMR, fingerprints, the generation marker, reopen, collection naming, and the error paths."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymilvus", reason="pymilvus is not installed (pip install 'ctxrag[milvus]')")
pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (pip install 'ctxrag[milvus]')")

from ctxrag.errors import ConfigError  # noqa: E402
from ctxrag.stores.engine.external import BACKEND_FILE, text_fingerprint  # noqa: E402
from ctxrag.stores.base import IndexedChunk  # noqa: E402
from ctxrag.stores.vectors.milvus import MilvusIndex, collection_name_for, is_server_uri, sparse_rows  # noqa: E402

from angled_vectors import ANGLES  # noqa: E402
from angled_vectors import chunk as _chunk  # noqa: E402
from angled_vectors import vec as _vec  # noqa: E402


@pytest.fixture
def index(tmp_path: Path):
    idx = MilvusIndex(tmp_path / "m.db", "unit", sparse=False)
    idx.add([_chunk(f"{n}:0", deg) for n, deg in ANGLES.items()])
    yield idx
    idx.close()


def test_search_is_exact_cosine_in_order(index: MilvusIndex) -> None:
    hits = index.search(_vec(0), k=4)
    assert [c for c, _ in hits] == ["a:0", "b:0", "c:0", "d:0"]
    for cid, cos in hits:
        assert cos == pytest.approx(np.cos(np.deg2rad(ANGLES[cid[0]])), abs=1e-5)
    assert hits[-1][1] == pytest.approx(-1.0, abs=1e-5)
    assert len(index.search(_vec(0), k=100)) == 4


def test_allowed_ids_restrict_candidates(index: MilvusIndex) -> None:
    assert [c for c, _ in index.search(_vec(0), k=3, allowed_chunk_ids={"c:0", "d:0", "zz:0"})] == ["c:0", "d:0"]
    assert index.search(_vec(0), k=3, allowed_chunk_ids=set()) == []
    # ids with quotes cannot break out of the filter expression
    assert index.search(_vec(0), k=3, allowed_chunk_ids={'a:0" or chunk_id != "'}) == []


def test_add_replaces_and_delete_removes(index: MilvusIndex) -> None:
    index.add([_chunk("d:0", 5, "new text")])
    assert len(index) == 4
    assert index.search(_vec(0), k=1)[0][0] == "d:0"
    assert index.fingerprints()["d:0"] == text_fingerprint("new text")
    index.delete(["a:0", "unknown:1"])
    assert len(index) == 3 and "a:0" not in index and "b:0" in index
    assert "a:0" not in [c for c, _ in index.search(_vec(0), k=4)]


def test_vectors_in_given_order(index: MilvusIndex) -> None:
    np.testing.assert_allclose(index.vectors(["c:0", "a:0"]), np.stack([_vec(80), _vec(10)]), atol=1e-6)
    with pytest.raises(KeyError, match="nope:0"):
        index.vectors(["a:0", "nope:0"])


def test_save_marker_and_reopen(index: MilvusIndex, tmp_path: Path) -> None:
    gen = tmp_path / "gen" / "dense"
    index.save(gen)
    info = json.loads((gen / BACKEND_FILE).read_text(encoding="utf-8"))
    assert info["backend"] == "milvus" and info["count"] == 4 and info["collection"] == "unit" and not info["sparse"]
    index.close()
    again = MilvusIndex(tmp_path / "m.db", "unit", sparse=True)  # an existing collection decides: no sparse field
    try:
        assert len(again) == 4 and again.dim == 2 and again.sparse is False
        assert [c for c, _ in again.search(_vec(0), k=2)] == ["a:0", "b:0"]
        assert set(again.fingerprints()) == {f"{n}:0" for n in ANGLES}
        with pytest.raises(ConfigError, match="no sparse vectors"):
            again.hybrid_search(_vec(0), {1: 1.0}, k=2)
    finally:
        again.close()


def test_errors(index: MilvusIndex) -> None:
    with pytest.raises(ValueError, match="without a vector"):
        index.add([IndexedChunk("x:0", "x", "t", "t")])
    with pytest.raises(ValueError, match="dimension 3"):
        index.add([IndexedChunk("x:0", "x", "t", "t", vector=np.ones(3, dtype=np.float32))])
    with pytest.raises(ValueError, match="query vector dimension 3"):
        index.search(np.ones(3, dtype=np.float32), k=1)
    with pytest.raises(ValueError, match="k must be positive"):
        index.search(_vec(0), k=0)
    with pytest.raises(ValueError, match="longer than"):
        index.add([IndexedChunk("x" * 600, "x", "t", "t", vector=_vec(0))])


def test_empty_collection_and_drop(tmp_path: Path) -> None:
    idx = MilvusIndex(tmp_path / "m.db", "empty", sparse=False)
    try:
        assert len(idx) == 0 and idx.search(_vec(0), k=3) == [] and idx.fingerprints() == {}
        idx.delete(["nothing:0"])
        idx.add([_chunk("a:0", 0)])
        assert len(idx) == 1
        idx.drop()
        assert len(idx) == 0
    finally:
        idx.close()


def test_naming_and_uris() -> None:
    a, b = collection_name_for("星河"), collection_name_for("星海")
    assert a != b and a.startswith("ctxrag_") and all(ch.isalnum() or ch == "_" for ch in a)
    assert collection_name_for("general") == collection_name_for("general")
    assert is_server_uri("http://milvus:19530") and is_server_uri("https://x.zillizcloud.com")
    assert not is_server_uri("/data/kb/milvus.db") and not is_server_uri("milvus.db")


def test_sparse_rows_placeholder_for_empty_rows() -> None:
    from scipy.sparse import csr_matrix

    rows = sparse_rows(csr_matrix(np.array([[0, 0.5, 0], [0, 0, 0]], dtype=np.float32)))
    assert rows[0] == {1: 0.5}
    assert len(rows[1]) == 1 and next(iter(rows[1].values())) < 1e-5  # Milvus rejects empty sparse vectors


def test_knowledge_bases_share_one_milvus_file_and_delete_drops_the_collection(tmp_path: Path) -> None:
    """``milvus_uri`` set: every knowledge base gets its own collection in that Milvus Lite file (as on a server);
    deleting a knowledge base drops its collection."""
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import Settings
    from ctxrag.stores.vectors.milvus import MilvusIndex

    from langchain_core.embeddings import DeterministicFakeEmbedding

    uri = tmp_path / "shared" / "milvus.db"
    s = Settings(home=tmp_path / "h", dense_backend="milvus", milvus_uri=str(uri), milvus_sparse=False)
    emb = DeterministicFakeEmbedding(size=8)  # composition only: the store's wiring, not retrieval quality
    for name in ("一号", "two"):
        kb = KnowledgeBase.open(name, s, embeddings=emb)
        kb.add_texts([{"text": f"hello from {name}", "source": f"mem://{name}"}])
        assert len(kb.dense_index()) == 1 and kb.indexes["dense"].uri == str(uri.resolve()) and kb.indexes["dense"].sparse is False
        kb.close()
    probe = MilvusIndex(uri, collection_name_for("一号"), sparse=False)
    try:
        assert len(probe) == 1
    finally:
        probe.close()
    KnowledgeBase.delete_kb("一号", s)
    probe = MilvusIndex(uri, collection_name_for("一号"), sparse=False)
    other = MilvusIndex(uri, collection_name_for("two"), sparse=False)
    try:
        assert len(probe) == 0 and not probe._client.has_collection(collection_name_for("一号"))
        assert len(other) == 1
    finally:
        probe.close()
        other.close()


_SERVER = """
import sys
from milvus_lite.adapter.grpc.server import start_server_in_thread
server, db, port = start_server_in_thread(sys.argv[1], host="127.0.0.1", port=0)
print(port, flush=True)
server.wait_for_termination()
"""


@pytest.fixture
def milvus_server(tmp_path: Path):  # noqa: ANN201
    """A Milvus gRPC server in its own process on 127.0.0.1 (milvus-lite's server): the same protocol a Milvus
    standalone speaks, so the client code path is the one used for ``CTXRAG_MILVUS_URI=http://host:19530``."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(tmp_path / "server-data")], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.strip().isdigit():
            pytest.fail(f"milvus server did not start (got {line!r})")
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_server_uri_reaches_a_running_milvus(tmp_path: Path, milvus_server: str) -> None:
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.retrievers.milvus_hybrid import MilvusHybridRetriever
    from ctxrag.settings import Settings

    s = Settings(home=tmp_path / "h", dense_backend="milvus", milvus_uri=milvus_server, milvus_token="root:s3cret-tok")
    kb = KnowledgeBase.open("srv", s)
    try:
        assert kb.indexes["dense"].is_server and not (kb.root / "milvus.db").exists()
        kb.add_texts([{"text": "The Falcon-7 pump moves 40 litres per minute.", "source": "mem://falcon"},
                      {"text": "Part XQ-4471 is a replacement gasket.", "source": "mem://xq"}])
        assert [d.metadata["source"] for d in kb.search("Falcon pump flow", k=1)] == ["mem://falcon"]
        assert [d.metadata["source"] for d in MilvusHybridRetriever(kb=kb, k=1).invoke("XQ-4471")] == ["mem://xq"]
        gen_dir = kb.generations.gen_dir(kb.generation) / "dense"
        assert "s3cret" not in (gen_dir / "backend.json").read_text(encoding="utf-8")  # the token is never written
        assert "s3cret" not in repr(kb.indexes["dense"]) + repr(kb.settings)
    finally:
        kb.close()
    kb = KnowledgeBase.open("srv", s)
    try:
        assert len(kb.dense_index()) == 2 and kb.stats()["chunks"] == 2
    finally:
        kb.close()
    KnowledgeBase.delete_kb("srv", s)
    probe = MilvusIndex(milvus_server, collection_name_for("srv"), sparse=False)
    try:
        assert not probe._client.has_collection(collection_name_for("srv"))
    finally:
        probe.close()


# ---- a real Milvus standalone server (PyPI's `milvus` package: Milvus 2.3, dense only) --------------------------------
# the session fixture `milvus_standalone` (tests/stores/conftest.py) skips when the `milvus` package is absent


@pytest.fixture
def server_index(milvus_standalone: str, request: pytest.FixtureRequest):  # noqa: ANN201
    name = "unit_" + _short_hash(request.node.name)
    idx = MilvusIndex(milvus_standalone, name, sparse=True)  # asks for sparse: a 2.3 server cannot, so it falls back
    idx.drop()
    idx.add([_chunk(f"{n}:0", deg) for n, deg in ANGLES.items()])
    yield idx
    idx.drop()
    idx.close()


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha1(text.encode()).hexdigest()[:10]


@pytest.mark.milvus_server
def test_standalone_server_index_contract(server_index: MilvusIndex) -> None:
    """The unit contract above, on the server: exact order, filters, replace, delete, vectors, fingerprints, reopen."""
    assert server_index.is_server and server_index.sparse is False and not server_index.server_supports_sparse()
    hits = server_index.search(_vec(0), k=4)
    assert [c for c, _ in hits] == ["a:0", "b:0", "c:0", "d:0"]
    for cid, cos in hits:
        assert cos == pytest.approx(np.cos(np.deg2rad(ANGLES[cid[0]])), abs=1e-5)
    assert [c for c, _ in server_index.search(_vec(0), k=3, allowed_chunk_ids={"c:0", "d:0", "zz:0"})] == ["c:0", "d:0"]
    assert server_index.search(_vec(0), k=3, allowed_chunk_ids={'a:0" or chunk_id != "'}) == []
    server_index.add([_chunk("d:0", 5, "new text")])
    assert len(server_index) == 4 and server_index.search(_vec(0), k=1)[0][0] == "d:0"
    assert server_index.fingerprints()["d:0"] == text_fingerprint("new text")
    server_index.delete(["a:0", "unknown:1"])
    assert len(server_index) == 3 and "a:0" not in server_index
    np.testing.assert_allclose(server_index.vectors(["c:0", "b:0"]), np.stack([_vec(80), _vec(40)]), atol=1e-6)
    with pytest.raises(ConfigError, match="no sparse vectors"):
        server_index.hybrid_search(_vec(0), {1: 1.0}, k=2)
    again = MilvusIndex(server_index.uri, server_index.collection, sparse=True)
    try:
        assert len(again) == 3 and again.dim == 2 and again.sparse is False
    finally:
        again.close()


@pytest.mark.milvus_server
def test_standalone_server_knowledge_base_hybrid_uses_our_bm25_and_bulk_import(tmp_path: Path, milvus_standalone: str) -> None:
    from ctxrag.indexing.bulk_import import kb_dimension, read_precomputed
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import Settings

    s = Settings(home=tmp_path / "h", dense_backend="milvus", milvus_uri=milvus_standalone)  # milvus_sparse: default on
    KnowledgeBase.open("srv23", s).close()
    KnowledgeBase.delete_kb("srv23", s)
    kb = KnowledgeBase.open("srv23", s)
    try:
        kb.add_texts([{"text": "The Falcon-7 pump moves 40 litres per minute.", "source": "mem://falcon"},
                      {"text": "Part XQ-4471 is a replacement gasket.", "source": "mem://xq"}])
        assert kb.indexes["dense"].is_server and kb.indexes["dense"].sparse is False  # 2.3: dense only
        assert [d.metadata["source"] for d in kb.search("Falcon pump flow", k=1)] == ["mem://falcon"]
        assert [d.metadata["source"] for d in kb.search("XQ-4471", k=1, mode="hybrid")] == ["mem://xq"]
        rows = [{"text": f"bulk chunk {i} about valves", "vector": np.eye(384)[i % 384].tolist(), "source": f"bulk://{i // 4}"}
                for i in range(30)]
        path = tmp_path / "bulk.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
        report = kb.import_precomputed(read_precomputed(path, kb.name, dim=kb_dimension(kb.dense_index(), kb.settings), batch_size=8))
        assert len(report.added) == 8 and len(kb.dense_index()) == 32 and kb.stats()["chunks"] == 32
        assert kb.dense_index().search(np.eye(384, dtype=np.float32)[5], k=1)[0][0] == kb.get_document("bulk://1").doc_id + ":1"
    finally:
        kb.close()
    KnowledgeBase.delete_kb("srv23", s)
