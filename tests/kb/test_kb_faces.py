"""One behaviour across the faces of a knowledge base (Python, CLI, server, LangChain VectorStore): the same contexts
at ingest, the same default search mode, the same id for the same chunk."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from langchain_core.documents import Document
from typer.testing import CliRunner

from ctxrag.cli.main import app
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import get_settings
from kb_processes import write_corpus

DOCS = {
    "falcon.md": "# Falcon-7 pump\n\n## Flow\nThe Falcon-7 pump moves 40 litres per minute at 2 bar.\n\n"
                 "## Noise\nIt runs below 30 dB at night in greenhouses.\n",
    "yushan.md": "# 玉山\n\n## 地理\n玉山位於臺灣中部，主峰海拔3952公尺。\n",
}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus", DOCS)


def _contexts(name: str) -> dict[tuple[str, int], str | None]:
    kb = KnowledgeBase.open(name, create=False)
    try:
        return {(Path(d.metadata["source"]).name, d.metadata["chunk_index"]): d.metadata.get("context")
                for d in kb.chunks.all_chunks()}
    finally:
        kb.close()


# ----------------------------------------------------------------------------------------- contexts at ingest


@pytest.mark.default_settings
def test_python_ingest_stores_the_contexts_cli_ingest_stores(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Contexts on (the shipped default) with the no-LLM ``header`` strategy: `kb.ingest` and `ctxrag ingest` write
    the same context for every chunk."""
    monkeypatch.setenv("CTXRAG_CONTEXT_STRATEGY", "header")
    get_settings.cache_clear()
    assert get_settings().contextualize is True
    kb = KnowledgeBase.open("py")
    kb.ingest([corpus], progress=False)
    kb.close()
    r = CliRunner().invoke(app, ["ingest", str(corpus), "--kb", "cli"])
    assert r.exit_code == 0, r.output
    python, cli = _contexts("py"), _contexts("cli")
    assert python == cli and python and None not in python.values()
    assert python[("falcon.md", 0)].startswith("Falcon-7 pump")


@pytest.mark.default_settings
def test_contextualize_argument_overrides_the_setting(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXRAG_CONTEXT_STRATEGY", "header")
    monkeypatch.setenv("CTXRAG_CONTEXTUALIZE", "false")
    get_settings.cache_clear()
    kb = KnowledgeBase.open("off")
    kb.ingest([corpus], progress=False)
    kb.close()
    assert set(_contexts("off").values()) == {None}
    kb = KnowledgeBase.open("on")
    kb.ingest([corpus], contextualize=True, progress=False)
    kb.close()
    assert None not in _contexts("on").values()
    r = CliRunner().invoke(app, ["ingest", str(corpus), "--kb", "cli-on", "--contextualize"])
    assert r.exit_code == 0, r.output
    assert _contexts("cli-on") == _contexts("on")


# ----------------------------------------------------------------------------------------- default search mode


def test_one_default_search_mode_everywhere(corpus: Path) -> None:
    from ctxrag.cli.query import ask, search
    from ctxrag.cli.serve import serve
    from ctxrag.kb.milvus import MilvusKnowledgeBase
    from ctxrag.retrievers.factory import make_multi_kb_retriever, make_retriever
    from ctxrag.retrievers.modes import DEFAULT_MODE
    from ctxrag.server.app import create_app
    from ctxrag.server.runnables import search_runnable

    def default(fn, name: str = "mode"):  # noqa: ANN001, ANN202
        value = inspect.signature(fn).parameters[name].default
        return getattr(value, "default", value)  # a typer.Option holds its default

    faces = [KnowledgeBase.search, KnowledgeBase.as_retriever, MilvusKnowledgeBase.search,
             MilvusKnowledgeBase.as_retriever, make_retriever, make_multi_kb_retriever, search, ask, serve,
             create_app, search_runnable]
    assert {default(face) for face in faces} == {"hybrid"} == {DEFAULT_MODE}
    kb = KnowledgeBase.open("modes")
    kb.ingest([corpus], progress=False)
    hybrid = [d.id for d in kb.as_retriever(k=3).invoke("Falcon pump noise")]
    assert [d.id for d in kb.search("Falcon pump noise", k=3)] == hybrid
    kb.close()


# ----------------------------------------------------------------------------------------- one id per chunk
# The caller's ids through the VectorStore face and the refusal of another document's chunk id run on both backends:
# tests/kb/test_conformance.py. Ids stored before they were chunk ids exist only in local knowledge bases.


def test_documents_added_before_ids_were_chunk_ids_are_still_found() -> None:
    from ctxrag import schema

    kb = KnowledgeBase.open("legacy")
    store = kb.as_vectorstore()
    record, chunks = store._records("old", Document("An old document.", metadata={"k": 1}))
    legacy = schema.make_chunk_id(record.doc_id, 0)  # how the face stored ids before
    chunk = chunks[0]
    kb.upsert_chunked([(record, [type(chunk)(legacy, chunk.doc_id, 0, chunk.content, chunk.indexed_text, None,
                                             {**chunk.metadata, schema.CHUNK_ID: legacy})])])
    found = store.get_by_ids(["old"])
    assert [(d.id, d.page_content, d.metadata) for d in found] == [("old", "An old document.", {"k": 1})]
    assert store.similarity_search("old document", k=1)[0].id == "old"
    kb.close()


def test_ingest_of_a_path_that_does_not_exist_raises_before_writing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python API fails loudly (the README's block run from another folder), naming the path and the folder
    relative paths are read from; nothing is written."""
    from ctxrag.errors import PathNotFound
    from ctxrag.settings import Settings

    monkeypatch.chdir(tmp_path)  # a project folder without the repository's examples/

    kb = KnowledgeBase.open("loud", Settings(home=tmp_path / "home"))
    (tmp_path / "real.md").write_text("# Real\n\nA real file.\n", encoding="utf-8")
    with pytest.raises(PathNotFound, match=r"examples/sample_corpus: no such file or directory \(relative") as e:
        kb.ingest([tmp_path / "real.md", "examples/sample_corpus"], progress=False)
    assert isinstance(e.value, FileNotFoundError)
    assert kb.list_documents() == []
