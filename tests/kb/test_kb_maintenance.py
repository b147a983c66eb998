"""`ctxrag.kb.maintenance` sees a knowledge base only through `MaintenanceTarget`: check and repair run on a proxy that
forwards the protocol's declared members and nothing else (no ``kb.store``, ``kb.generations``, ``kb.snapshots``),
on a real knowledge base (SQLite, FAISS, BM25; `fake` embeddings) with a damaged and a stale index."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxrag.kb.maintenance import MaintenanceTarget, check, repair
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, Settings
from test_kb_integrity import index_file

DECLARED = {n for n in vars(MaintenanceTarget) if not n.startswith("_")} | set(MaintenanceTarget.__annotations__)


class OnlyDeclared:
    """Forwards the members `MaintenanceTarget` declares; any other attribute is an error naming it."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self._kb = kb

    def __getattr__(self, name: str) -> Any:
        if name not in DECLARED:
            raise AttributeError(f"kb_maintenance used {name!r}, which MaintenanceTarget does not declare")
        return getattr(self._kb, name)


def test_the_protocol_declares_what_repair_needs() -> None:
    assert DECLARED == {"name", "settings", "root", "generation", "stored_chunk_ids", "index_kinds", "saved_index",
                        "index_setup", "repair_session", "commit"}


def test_check_and_repair_through_declared_members_only(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", embeddings=EmbeddingSettings(provider="fake"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, word in enumerate(["amberquartz", "bluefjord", "copperlynx"]):
        (corpus / f"doc{i}.md").write_text(f"# Doc {i}\n\nThis document is about {word}.\n", encoding="utf-8")
    kb = KnowledgeBase.open("maint", settings)
    kb.ingest([corpus], progress=False)
    before = [d.id for d in kb.search("bluefjord", k=3, mode="bm25")]
    gen = kb.generation
    assert check(OnlyDeclared(kb)).clean
    index_file(kb.generations.gen_dir(gen), "bm25/bm25.json").write_text("{}", encoding="utf-8")  # damaged in place
    report = check(OnlyDeclared(kb))
    assert not report.clean and report.counts["bm25"] is None and "bm25.json" in "\n".join(report.lines())
    fixed = repair(OnlyDeclared(kb))
    assert fixed.actions["bm25"].startswith("rebuilt from 3 stored chunks") and fixed.actions["dense"] == "ok"
    assert fixed.generation == kb.generation == gen + 1
    assert check(OnlyDeclared(kb)).clean and repair(OnlyDeclared(kb)).generation is None  # nothing left to do
    assert [d.id for d in kb.search("bluefjord", k=3, mode="bm25")] == before
    kb.close()
