"""A Milvus-resident knowledge base (``CTXRAG_STORE=milvus``) on milvus-lite's gRPC server, driven by real `ctxrag`
processes: maintenance commands that do not apply say so, and a writer whose knowledge base another process deleted
gets `KnowledgeBaseDeleted` instead of a pymilvus traceback (and re-creates nothing)."""
from __future__ import annotations

import signal
import subprocess
import sys
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
    from ctxrag.kb.local import KnowledgeBase
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


ROUNDS = 2


def test_two_ingests_of_the_same_folder_at_once_leave_a_knowledge_base_check_calls_clean(tmp_path: Path,
                                                                                          milvus: str) -> None:
    """Before: in 4 of 6 rounds `kb check` said "1 of 1 chunks from its last write" for complete documents (the row's
    write id came from one process, its chunks' from the other) and `kb repair` then dropped them (52 -> 48). The race
    depends on timing (it did not show here on an idle machine); the next test makes its interleaving certain."""
    import json

    env = process_env(tmp_path / "home", "milvus", milvus)
    total = 0
    for n in range(ROUNDS):
        folder = _files(tmp_path / f"round{n}", 10, f"round {n}")
        procs = [subprocess.Popen(cli("ingest", str(folder), "--kb", KB), env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for proc in procs:
            out, err = proc.communicate(timeout=HANG_GUARD_S)
            assert proc.returncode == 0, out + err
        total += 10
        r = _run(env, "kb", "check", KB)
        assert r.returncode == 0, f"round {n}: {r.stdout + r.stderr}"
    r = _run(env, "kb", "repair", KB)
    assert r.returncode == 0 and "dropped 0 half-written" in r.stdout, r.stdout + r.stderr
    docs = json.loads(_run(env, "doc", "list", "--kb", KB, "--json").stdout)
    assert len(docs) == total, len(docs)


def _milvus_kb(tmp_path: Path, milvus: str, node: str):  # noqa: ANN202
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import EmbeddingSettings, LLMSettings, Settings

    settings = Settings(home=tmp_path / node, store="milvus", milvus_uri=milvus, contextualize=False,
                        embeddings=EmbeddingSettings(provider="fake"), llm=LLMSettings(provider="none"))
    return KnowledgeBase.open(KB, settings, create=True)


def test_two_writers_of_the_same_file_interleaved_leave_no_false_alarm_and_repair_drops_nothing(
        tmp_path: Path, milvus: str) -> None:
    """The interleaving the concurrent ingests hit, made certain: node A writes its chunks, node B writes the same
    file completely, then A marks the row done. Before: the row carried A's write id and the chunks B's, so
    `check` called the document half-written and `repair` deleted it."""
    import threading

    folder = _files(tmp_path / "docs", 1, "shared")
    a, b = _milvus_kb(tmp_path, milvus, "node-a"), _milvus_kb(tmp_path, milvus, "node-b")
    try:
        chunks_written, b_done = threading.Event(), threading.Event()
        real = a.store._delete_stale

        def pause_after_chunks(items):  # noqa: ANN001, ANN202 - between A's step 2 and step 4
            chunks_written.set()
            assert b_done.wait(HANG_GUARD_S)
            return real(items)

        a.store._delete_stale = pause_after_chunks
        errors: list[BaseException] = []

        def ingest_a() -> None:
            try:
                a.ingest([folder], progress=False)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        thread = threading.Thread(target=ingest_a)
        thread.start()
        assert chunks_written.wait(HANG_GUARD_S)
        b.ingest([folder], progress=False)
        b_done.set()
        thread.join()
        assert not errors, errors
        report = b.check()
        assert report.clean, [(d.index, d.missing, d.extra, d.error) for d in report.differences]
        b.repair()
        assert len(b.list_documents()) == 1 and len(b.store.chunks_of(b.list_documents()[0].doc_id)) == 1
    finally:
        a.close()
        b.close()


_KILL_DURING_REPLACE = """
import os, signal, sys
from pymilvus import MilvusClient
real, seen = MilvusClient.upsert, []

def upsert(self, collection_name, data, *args, **kwargs):
    if any("revised" in str(row.get("content", "")) for row in data):  # a chunk row of the new version
        seen.append(collection_name)
        if len(seen) == int(sys.argv[2]):  # this upsert of the new version's chunks: its first rows, then kill -9
            real(self, collection_name, data[:5], *args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
    return real(self, collection_name, data, *args, **kwargs)

MilvusClient.upsert = upsert
from ctxrag.cli.main import app
app(["ingest", sys.argv[1], "--kb", "%s"])
""" % KB


def _long_document(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    parts = [f"## Part {i}\n\n" + f"This {version} part {i} explains step {i} of the procedure in detail. " * 12
             for i in range(30)]
    (folder / "manual.md").write_text("# Manual\n\n" + "\n\n".join(parts) + "\n", encoding="utf-8")
    return folder


def _replace_killed(tmp_path: Path, milvus: str, at_upsert: int) -> tuple[dict[str, str], int]:
    """Ingest the original manual, then a revised one in a process killed -9 after the first rows of its
    `at_upsert`-th upsert of revised chunks; returns the environment and the original's chunk count."""
    env = process_env(tmp_path / "home", "milvus", milvus)
    folder = _long_document(tmp_path / "docs", "original")
    assert _run(env, "ingest", str(folder), "--kb", KB).returncode == 0
    kb = _milvus_kb(tmp_path, milvus, "reader")
    (doc,) = kb.list_documents()
    n_old = len(kb.store.chunks_of(doc.doc_id))
    kb.close()
    assert n_old >= 10, n_old
    _long_document(folder, "revised")
    proc = subprocess.run([sys.executable, "-c", _KILL_DURING_REPLACE, str(folder), str(at_upsert)], env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    return env, n_old


def _versions(tmp_path: Path, milvus: str) -> tuple[list[str], list[str]]:
    """(sources doc list shows, the set of versions among the listed document's chunks and bm25 hits)."""
    kb = _milvus_kb(tmp_path, milvus, "reader")
    try:
        docs = kb.list_documents()
        versions = set()
        for d in docs:
            versions |= {"revised" if "revised" in c.content else "original" for c in kb.store.chunks_of(d.doc_id)}
        hits = kb.search("procedure step detail", k=5, mode="bm25")
        versions |= {"revised" if "revised" in h.page_content else "original" for h in hits}
        return [Path(d.source).name for d in docs], sorted(versions)
    finally:
        kb.close()


def test_a_replace_killed_after_its_first_chunks_keeps_the_previous_version_whole(tmp_path: Path,
                                                                                  milvus: str) -> None:
    """Issue #43 finding 3. Before: `doc list` hid the document while search returned a mix, and `kb repair`
    dropped it (0 chunks of either version). Now the new version is staged whole first: killed while staging, the
    stored version is untouched, listed and searched; `kb repair` deletes the half-staged copy and keeps it."""
    env, n_old = _replace_killed(tmp_path, milvus, at_upsert=1)
    assert _versions(tmp_path, milvus) == (["manual.md"], ["original"])
    kb = _milvus_kb(tmp_path, milvus, "reader")
    assert len(kb.store.chunks_of(kb.list_documents()[0].doc_id)) == n_old
    kb.close()
    r = _run(env, "kb", "repair", KB)
    assert r.returncode == 0 and "dropped 0 half-written" in r.stdout, r.stdout + r.stderr
    assert "kept the stored version of 1 documents" in r.stdout, r.stdout
    assert _versions(tmp_path, milvus) == (["manual.md"], ["original"])
    assert _run(env, "kb", "check", KB).returncode == 0
    assert _run(env, "ingest", str(tmp_path / "docs"), "--kb", KB).returncode == 0  # the next ingest replaces it
    assert _versions(tmp_path, milvus) == (["manual.md"], ["revised"])
    r = _run(env, "kb", "check", KB)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_replace_killed_after_staging_is_finished_from_the_staged_copy(tmp_path: Path, milvus: str) -> None:
    """Killed while writing the staged version over the old one: the new version exists whole in staging, so
    `kb repair` finishes the write from there (the new version whole; nothing dropped)."""
    env, _ = _replace_killed(tmp_path, milvus, at_upsert=2)
    r = _run(env, "kb", "repair", KB)
    assert r.returncode == 0 and "finished 1 writes" in r.stdout and "dropped 0" in r.stdout, r.stdout + r.stderr
    assert _versions(tmp_path, milvus) == (["manual.md"], ["revised"])
    r = _run(env, "kb", "check", KB)
    assert r.returncode == 0, r.stdout + r.stderr
