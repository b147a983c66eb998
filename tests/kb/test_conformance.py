"""The knowledge-base contract (`ctxrag.kb.protocol.KnowledgeBaseProtocol`) kept by both backends at the facade:
the local store and Milvus (``store="milvus"``, a milvus-lite file in the knowledge base folder), each opened through
the registry and driven only through the protocol: lifecycle, ingest, the default search mode, documents, deletes,
check and repair, notes, the document catalog and the VectorStore face; and every protocol method's defaults are the backend's defaults.

Real parts: SQLite, FAISS, BM25, milvus-lite; the `fake` embeddings (this suite tests the contract, not ranking)."""
from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from langchain_core.documents import Document

from ctxrag.errors import DocumentNotFound, KnowledgeBaseNotFound, PathNotFound
from ctxrag.kb import BACKENDS, KnowledgeBaseProtocol, backend, delete_kb, list_names, open_kb
from ctxrag.kb.protocol import KnowledgeBaseBackend
from ctxrag.kb.notes import NoteBook
from ctxrag.retrievers.modes import DEFAULT_MODE
from ctxrag.settings import EmbeddingSettings, LLMSettings, Settings

from kb_processes import write_corpus
from milvus_lite_server import HAVE_MILVUS_LITE, SKIP_REASON

STORES = [pytest.param("local", id="local"),
          pytest.param("milvus", id="milvus-lite",
                       marks=[pytest.mark.skipif(not HAVE_MILVUS_LITE, reason=SKIP_REASON)])]
DOCS = {
    "falcon.md": "# Falcon pumps\n\nThe Falcon-7 pump moves forty litres of brine per minute.\n",
    "heron.md": "# Heron valves\n\nThe Heron-3 valve closes quickly under full pressure.\n",
    "xinghe.md": "# 星河知识库\n\n团队版包含两百 GB 存储空间，默认端口是 9321。\n",
}


def _protocol_members() -> list[str]:
    return sorted(n for n, v in vars(KnowledgeBaseProtocol).items()
                  if not n.startswith("_") and (callable(v) or isinstance(v, property)))


@pytest.fixture
def settings(tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return Settings(home=tmp_path / "home", store=request.param, contextualize=False,
                    embeddings=EmbeddingSettings(provider="fake"), llm=LLMSettings(provider="none"))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus", DOCS)


@pytest.fixture
def kb(settings: Settings, corpus: Path) -> Iterator[KnowledgeBaseProtocol]:
    with open_kb("conformance", settings) as kb:
        report = kb.ingest([corpus], progress=False)
        assert sorted(Path(f.path).name for f in report.added) == sorted(DOCS), report.files
        yield kb


# -------------------------------------------------------------------------------- the contract, on the classes


@pytest.mark.parametrize("store", sorted(BACKENDS))
def test_every_backend_has_every_protocol_member_with_the_protocols_defaults(store: str) -> None:
    cls = backend(store)
    for name in ["open", "list_names", "delete_kb"]:
        assert callable(getattr(cls, name, None)), f"{cls.__name__} lacks {name} ({KnowledgeBaseBackend.__name__})"
    for name in _protocol_members():
        ours = getattr(cls, name, None)
        assert ours is not None, f"{cls.__name__} lacks {name!r} of KnowledgeBaseProtocol"
        if isinstance(ours, property) or not callable(ours):
            continue
        declared = inspect.signature(getattr(KnowledgeBaseProtocol, name)).parameters
        params = inspect.signature(ours).parameters
        for p in declared.values():
            if p.default is not inspect.Parameter.empty:
                assert p.name in params, f"{cls.__name__}.{name} has no parameter {p.name!r}"
                assert params[p.name].default == p.default, (
                    f"{cls.__name__}.{name}({p.name}=...) defaults to {params[p.name].default!r}, "
                    f"the protocol to {p.default!r}")


def test_both_backends_default_to_the_same_search_mode() -> None:
    defaults = {(store, face): inspect.signature(getattr(backend(store), face)).parameters["mode"].default
                for store in BACKENDS for face in ("search", "as_retriever")}
    assert set(defaults.values()) == {DEFAULT_MODE}, defaults


def test_an_unknown_store_is_named() -> None:
    with pytest.raises(Exception, match="'chroma'"):
        backend("chroma")


# ------------------------------------------------------------------------ the contract, on open knowledge bases


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_lifecycle_open_list_delete(settings: Settings) -> None:
    with pytest.raises(KnowledgeBaseNotFound):
        open_kb("absent", settings, create=False)
    assert "absent" not in list_names(settings)
    open_kb("made", settings).close()
    assert "made" in list_names(settings)
    with open_kb("made", settings, create=False) as again:
        assert again.name == "made" and again.list_documents() == []
    delete_kb("made", settings)
    assert "made" not in list_names(settings)
    with pytest.raises(KnowledgeBaseNotFound):
        open_kb("made", settings, create=False)
    with pytest.raises(KnowledgeBaseNotFound):
        delete_kb("made", settings)


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_ingest_again_skips_and_a_changed_file_is_updated(kb: KnowledgeBaseProtocol, corpus: Path) -> None:
    again = kb.ingest([corpus], progress=False)
    assert len(again.skipped) == len(DOCS) and not again.added and not again.updated, again.files
    (corpus / "heron.md").write_text("# Heron valves\n\nThe Heron-3 valve now closes slowly.\n", encoding="utf-8")
    changed = kb.ingest([corpus], progress=False)
    assert [Path(f.path).name for f in changed.updated] == ["heron.md"], changed.files
    assert "slowly" in kb.get_document("heron.md").text
    stats = kb.stats()
    assert stats["documents"] == len(DOCS) and stats["chunks"] >= len(DOCS)
    assert kb.count() == (stats["documents"], stats["chunks"])


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_a_path_that_does_not_exist_raises_before_anything_is_written(settings: Settings, tmp_path: Path) -> None:
    real = write_corpus(tmp_path / "real", {"real.md": "# Real\n\nA real file.\n"}) / "real.md"
    with open_kb("loud", settings) as kb:
        with pytest.raises(PathNotFound, match="no-such-folder") as e:
            kb.ingest([real, tmp_path / "no-such-folder"], progress=False)
        assert isinstance(e.value, FileNotFoundError)
        assert kb.list_documents() == [] and kb.count() == (0, 0)


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_search_default_mode_is_hybrid_and_finds_the_document(kb: KnowledgeBaseProtocol) -> None:
    default = kb.search("Falcon-7 brine litres", k=2)
    assert [d.id for d in default] == [d.id for d in kb.search("Falcon-7 brine litres", k=2, mode=DEFAULT_MODE)]
    assert Path(default[0].metadata["source"]).name == "falcon.md"
    assert "score" in default[0].metadata
    assert [d.id for d in kb.as_retriever(k=2).invoke("Falcon-7 brine litres")] == [d.id for d in default]
    only = kb.search("Falcon-7 brine litres", k=3, filter={"file_type": "markdown"})
    assert only and all(d.metadata["file_type"] == "markdown" for d in only)


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_get_list_and_delete_documents(kb: KnowledgeBaseProtocol) -> None:
    assert sorted(Path(d.source).name for d in kb.list_documents()) == sorted(DOCS)
    falcon = kb.get_document("falcon.md")
    assert kb.get_document(falcon.doc_id) == falcon
    assert kb.delete_document("falcon.md").doc_id == falcon.doc_id
    with pytest.raises(DocumentNotFound):
        kb.get_document("falcon.md")
    with pytest.raises(DocumentNotFound):
        kb.delete_document("falcon.md")
    assert all(Path(d.metadata["source"]).name != "falcon.md" for d in kb.search("Falcon-7 brine litres", k=3))
    heron = kb.get_document("heron.md").doc_id
    assert kb.delete_documents([heron, "no-such-id"]) == [heron]
    assert [Path(d.source).name for d in kb.list_documents()] == ["xinghe.md"]


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_check_is_clean_and_repair_keeps_it_clean(kb: KnowledgeBaseProtocol) -> None:
    report = kb.check()
    assert report.clean, report.lines()
    assert report.kb == kb.name
    kb.repair()
    assert kb.check().clean


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_notes_live_in_either_backend(kb: KnowledgeBaseProtocol) -> None:
    book = NoteBook(kb)
    try:
        note = book.create("Quartzite gaskets replace rubber ones in the Falcon-7.", title="gaskets",
                           tags=["parts"])
        found = book.search("quartzite gaskets", k=3)
        assert [n.id for n, _ in found][:1] == [note.id]
        book.delete(note.id)
        assert all(n.id != note.id for n, _ in book.search("quartzite gaskets", k=3))
    finally:
        book.close()


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_the_catalog_lists_every_document_and_finds_one_by_its_entry(kb: KnowledgeBaseProtocol) -> None:
    """The document catalog the routers and the Assistant read (``kb.catalog()``): an entry per stored document,
    its vectors kept in the knowledge base's folder, and a search over them (the fake embedding of an entry's own
    text is its vector, so the entry comes first)."""
    catalog = kb.catalog()
    entries = catalog.entries()
    assert sorted(Path(e.source).name for e in entries) == sorted(DOCS)
    heron = next(e for e in entries if Path(e.source).name == "heron.md")
    assert heron.title == "Heron valves" and "Heron-3" in heron.summary
    assert catalog.search(heron.text, k=1)[0][0] == heron.doc_id
    assert (kb.root / "catalog" / "vectors.npy").is_file()


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_search_as_an_agent_tool(kb: KnowledgeBaseProtocol) -> None:
    tool = kb.as_tool(name="pumps", k=2)
    msg = tool.invoke({"type": "tool_call", "id": "1", "name": tool.name, "args": {"query": "Falcon-7 brine litres"}})
    assert tool.name == "pumps" and len(msg.artifact) == 2
    assert Path(msg.artifact[0].metadata["source"]).name == "falcon.md" and "Falcon-7" in msg.content


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_the_vectorstore_face_adds_and_finds_by_id(kb: KnowledgeBaseProtocol) -> None:
    store = kb.as_vectorstore()
    assert store.add_texts(["Basalt tiles line the Heron-3 housing."], ids=["basalt"]) == ["basalt"]
    hits = store.similarity_search("Basalt tiles line the Heron-3 housing.", k=1)
    assert [h.id for h in hits] == ["basalt"]
    assert store.delete(["basalt"])
    assert "basalt" not in [h.id for h in store.similarity_search("Basalt tiles", k=5)]



class CountingEmbed:
    """Passage vectors that record each call's size (a vector per text, naming its position)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), 8), dtype=np.float32)
        out[:, 0] = np.arange(1, len(texts) + 1)
        return out


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_every_mode_returns_the_callers_ids(settings: Settings) -> None:
    """Texts added through the VectorStore face with ids of the caller's come back under those ids from the
    retrievers of every mode, not as chunk ids of the backend's making."""
    with open_kb("ids", settings) as kb:
        store = kb.as_vectorstore()
        store.add_texts(["FAISS keeps dense vectors in memory.", "Paris is the capital of France."],
                        ids=["faiss", "paris"])
        store.add_documents([Document("Berlin is the capital of Germany.", id="berlin")])
        assert kb.count() == (3, 3)
        for mode in ("dense", "bm25", "hybrid"):
            got = [d.id for d in kb.as_retriever(mode=mode, k=3).invoke("Paris capital of France")]
            assert "paris" in got and set(got) <= {"faiss", "paris", "berlin"}, (mode, got)


@pytest.mark.parametrize("settings", STORES, indirect=True)
def test_ingest_embeds_chunks_of_several_documents_per_call_and_reports_alike(settings: Settings) -> None:
    """Both backends write through the one pipeline (`ctxrag.indexing.pipeline`): batched embedding across
    documents, the same outcomes, and the commit batches of `commit_every`."""
    settings = settings.model_copy(update={"embeddings": EmbeddingSettings(provider="fake", batch_size=4)})
    with open_kb("batched", settings) as kb:
        embed = CountingEmbed()
        kb._embed = embed  # type: ignore[method-assign]  # the one embed function the pipeline is given
        report = kb.add_texts([{"text": f"document number {i} about pumps", "source": f"mem://{i}"}
                               for i in range(10)] + [{"text": "   ", "source": "mem://blank"}])
        assert embed.calls == [4, 4, 2]  # ten one-chunk documents: three calls, not ten
        assert [f.status for f in report.files] == ["added"] * 10 + ["failed"]
        assert report.files[-1].reason == "empty text"
        again = kb.add_texts([{"text": "document number 3 about pumps, changed", "source": "mem://3"},
                              {"text": "document number 4 about pumps", "source": "mem://4"}])
        assert [(f.status, f.reason) for f in again.files] == [("updated", "content changed"),
                                                               ("skipped", "unchanged (same content hash)")]
        assert embed.calls == [4, 4, 2, 1]
        assert len(kb.list_documents()) == 10
