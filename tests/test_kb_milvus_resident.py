"""A Milvus-resident knowledge base (``CTXRAG_STORE=milvus``) on milvus-lite's gRPC server, driven by real `ctxrag`
processes: maintenance commands that do not apply say so, and a writer whose knowledge base another process deleted
gets `KnowledgeBaseDeleted` instead of a pymilvus traceback (and re-creates nothing)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from milvus_lite_server import HAVE_MILVUS_LITE, SKIP_REASON, start_milvus_lite_server

pytestmark = [pytest.mark.skipif(not HAVE_MILVUS_LITE, reason=SKIP_REASON),
              pytest.mark.slow]  # real processes on one Milvus: the full suite, not the fast lane

from kb_processes import KB, cli, process_env  # noqa: E402
from ctxrag.errors import KnowledgeBaseDeleted  # noqa: E402
from ctxrag.testing.llm_server import HANG_GUARD_S  # noqa: E402


@pytest.fixture
def milvus(tmp_path: Path):  # noqa: ANN201
    with start_milvus_lite_server(tmp_path / "milvus-server") as uri:
        yield uri


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(cli(*args), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)


def _files(root: Path, n: int, tag: str = "") -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"f{i:02d}.md").write_text(f"# File {i}\n\nThis file {tag} talks about item number {i}.\n",
                                           encoding="utf-8")
    return root


def test_kb_optimize_on_a_milvus_knowledge_base_says_milvus_merges_its_own_segments(tmp_path: Path,
                                                                                       milvus: str) -> None:
    """Before: ``AttributeError: 'MilvusKnowledgeBase' object has no attribute 'snapshots'``."""
    env = process_env(tmp_path / "home", "milvus", milvus)
    assert _run(env, "ingest", str(_files(tmp_path / "docs", 2)), "--kb", KB).returncode == 0
    r = _run(env, "kb", "optimize", KB)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and "lives in Milvus" in r.stderr and "merges its own segments" in r.stderr


def test_a_milvus_writer_whose_knowledge_base_was_deleted_gets_knowledge_base_deleted(tmp_path: Path,
                                                                                         milvus: str) -> None:
    """Before: the writer died with a pymilvus traceback (collection not found)."""
    from ctxrag.knowledge_base import KnowledgeBase
    from ctxrag.settings import EmbeddingSettings, LLMSettings, Settings

    env = process_env(tmp_path / "home", "milvus", milvus)
    settings = Settings(home=tmp_path / "home", store="milvus", milvus_uri=milvus, contextualize=False,
                        embeddings=EmbeddingSettings(provider="fake"), llm=LLMSettings(provider="none"))
    kb = KnowledgeBase.open(KB, settings, create=True)
    try:
        kb.ingest([_files(tmp_path / "first", 2)], progress=False)
        r = _run(env, "kb", "delete", KB, "--yes")  # another process
        assert r.returncode == 0, r.stdout + r.stderr
        with pytest.raises(KnowledgeBaseDeleted, match=KB):
            kb.ingest([_files(tmp_path / "second", 2, "again")], progress=False)
    finally:
        kb.close()
    r = _run(env, "kb", "list")
    assert KB not in r.stdout, r.stdout  # nothing re-created
