"""A Milvus-resident knowledge base (``CTXRAG_STORE=milvus``) on milvus-lite's gRPC server, driven by real `ctxrag`
processes: maintenance commands that do not apply say so, and a writer whose knowledge base another process deleted
gets `KnowledgeBaseDeleted` instead of a pymilvus traceback (and re-creates nothing)."""
from __future__ import annotations

import signal
import time
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


def _version(text: str) -> str:
    return "revised" if "revised" in text else "original"


def _versions(tmp_path: Path, milvus: str) -> tuple[list[str], list[str]]:
    """(sources doc list shows, the set of versions among the listed document's chunks, its text and the hits of
    a search in each mode, all its chunks included)."""
    kb = _milvus_kb(tmp_path, milvus, "reader")
    try:
        docs = kb.list_documents()
        versions = set()
        for d in docs:
            versions |= {_version(c.content) for c in kb.store.chunks_of(d.doc_id)} | {_version(d.text)}
        for mode in ("bm25", "dense", "hybrid"):
            versions |= {_version(h.page_content) for h in kb.search("procedure step detail", k=50, mode=mode)}
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
    assert "kept the stored version, deleted the staged copy (the replace stopped while staging" in r.stdout, r.stdout
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


_STOP_AT = """
import os, signal, socket, sys, time
from pathlib import Path
from pymilvus import MilvusClient
folder, moment, how = sys.argv[1], sys.argv[2], sys.argv[3]
host, command = (sys.argv[4], sys.argv[5:]) if len(sys.argv) > 4 else ("", ["ingest", folder, "--kb", "%s"])
if host:  # this process plays a node on another host: it names itself so
    socket.gethostname = lambda: host
upsert, delete, swapped = MilvusClient.upsert, MilvusClient.delete, []

def stop():  # kill -9 this process, or (how = a folder) say so there and wait until the test lets it go on
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    Path(how, "paused").touch()
    while not Path(how, "go").exists():
        time.sleep(0.05)

def revised(data):
    return any("revised" in str(row.get("content", "")) for row in data)

def patched_upsert(self, collection_name, data, *args, **kwargs):
    status = data[0].get("status") if collection_name.endswith("_docs") and data else None
    if status == "ok":
        swapped.append(True)
    if (moment, collection_name.rsplit("_", 1)[-1]) in {("staging", "staged"), ("swapping", "chunks"),
                                                        ("adding", "chunks")} \\
            and revised(data):  # the first rows of the new version (adding: of a new document), then stop
        upsert(self, collection_name, data[:5], *args, **kwargs)
        stop()
    if moment == "staged" and status == "swapping":  # staged whole, the row not yet switched to it
        stop()
    return upsert(self, collection_name, data, *args, **kwargs)

def patched_delete(self, collection_name, *args, **kwargs):
    if moment == "stale" and collection_name.endswith("_chunks") \\
            or moment == "marked" and collection_name.endswith("_staged") and swapped:
        stop()
    return delete(self, collection_name, *args, **kwargs)

MilvusClient.upsert, MilvusClient.delete = patched_upsert, patched_delete
from ctxrag.cli.main import app
app(command)
""" % KB

N_REVISED = 30
"""Chunks of the 20-part revision (the 30-part original has 50: a replace deletes 20 stale ones)."""
MOMENTS = {  # where a replace stops -> the version readers must see whole
    "staging": "original",   # the new version's first rows in the staging collection
    "staged": "original",    # staged whole, before the row switches readers to it
    "swapping": "revised",   # the row says swapping; the new version's first rows over the old chunks
    "stale": "revised",      # the new chunks written, the old ones beyond them not yet deleted
    "marked": "revised",     # the row says ok; the staged copy not yet deleted
}


def _revise(tmp_path: Path, milvus: str) -> tuple[dict[str, str], Path]:
    """Ingest the 30-part original manual, then write its 20-part revision over the file (not ingested)."""
    env = process_env(tmp_path / "home", "milvus", milvus)
    folder = _long_document(tmp_path / "docs", "original")
    assert _run(env, "ingest", str(folder), "--kb", KB).returncode == 0
    text = (folder / "manual.md").read_text(encoding="utf-8")
    (folder / "manual.md").write_text(text.split("## Part 20")[0].replace("original", "revised"), encoding="utf-8")
    return env, folder


def _wait_paused(gate: Path, proc: subprocess.Popen) -> None:
    """Until the writer `_stop_replace` started with a gate folder says it is paused (it must not exit first)."""
    while not (gate / "paused").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)


def _stop_replace(env: dict[str, str], folder: Path, moment: str, how: str = "kill") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _STOP_AT, str(folder), moment, how], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _whole(tmp_path: Path, milvus: str) -> tuple[str, int, int]:
    """(the version a fresh reader sees, its chunk count, the staged rows left); asserts that the version is
    one and whole: its chunks are numbered 0..n-1 and n is the listed document's chunk count."""
    names, versions = _versions(tmp_path, milvus)
    assert names == ["manual.md"] and len(versions) == 1, (names, versions)
    kb = _milvus_kb(tmp_path, milvus, "reader")
    try:
        (doc,) = kb.list_documents()
        chunks = kb.store.chunks_of(doc.doc_id)
        assert [c.chunk_index for c in chunks] == list(range(doc.n_chunks)), (doc.n_chunks, len(chunks))
        store = kb.store
        if not store._client.has_collection(store.staging_name):
            return versions[0], len(chunks), 0
        store._client.load_collection(store.staging_name)
        staged = store._client.query(store.staging_name, filter="", output_fields=["count(*)"])[0]["count(*)"]
        return versions[0], len(chunks), int(staged)
    finally:
        kb.close()


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_a_replace_killed_at_each_step_shows_one_whole_version_and_check_and_repair_settle_it(
        tmp_path: Path, milvus: str, moment: str) -> None:
    """Issue #43, fourth pass. A `ctxrag ingest` replacing a 30-chunk document by a 20-chunk one is killed -9 at
    each step. Readers (doc list, the document's chunks and text, bm25/dense/hybrid search) see one version whole:
    the old one until the row switches to the staged copy, the new one from then on. `kb check` names the staged
    copy the kill left (document, write, writer gone) and exits 1; `kb repair` swaps the staged copy in when the old
    version was already being overwritten, otherwise keeps the stored version and deletes the copy, saying which.
    Before: from the swap on, `doc list` hid the document and search mixed both versions; check listed no staged
    copy."""
    env, folder = _revise(tmp_path, milvus)
    proc = _stop_replace(env, folder, moment)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL, out + err
    seen = MOMENTS[moment]
    version, n, staged = _whole(tmp_path, milvus)
    assert version == seen and staged > 0, (version, staged)  # one version whole; the kill left a staged copy
    r = _run(env, "kb", "check", KB)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "staged copies left by a replace that stopped" in r.stdout and "manual.md" in r.stdout, r.stdout
    assert f"on {__import__('socket').gethostname()} gone" in r.stdout and "write " in r.stdout, r.stdout
    r = _run(env, "kb", "repair", KB)
    assert r.returncode == 0 and "dropped 0 half-written" in r.stdout, r.stdout + r.stderr
    if moment in ("swapping", "stale"):
        assert "new version swapped in from its whole staged copy" in r.stdout, r.stdout
    elif moment == "marked":
        assert "kept the stored version, deleted the staged copy (the replace stopped after its swap" in r.stdout
    else:
        assert "kept the stored version, deleted the staged copy (the replace stopped " in r.stdout, r.stdout
        assert "the old version is stored whole" in r.stdout, r.stdout
    assert _whole(tmp_path, milvus) == (seen, n, 0)
    r = _run(env, "kb", "check", KB)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("moment", ["staging", "swapping", "marked"])
def test_the_next_ingest_after_a_killed_replace_completes_it(tmp_path: Path, milvus: str, moment: str) -> None:
    """No `kb repair`: the next `ctxrag ingest` of the folder finishes a stopped swap (or replaces the untouched
    old version) and leaves no staged copy; `kb check` is clean after it."""
    env, folder = _revise(tmp_path, milvus)
    proc = _stop_replace(env, folder, moment)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL, out + err
    r = _run(env, "ingest", str(folder), "--kb", KB)
    assert r.returncode == 0, r.stdout + r.stderr
    version, n, staged = _whole(tmp_path, milvus)
    assert (version, staged) == ("revised", 0) and n == N_REVISED, n
    r = _run(env, "kb", "check", KB)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("moment", ["staging", "swapping"])
def test_a_replace_in_flight_in_another_process_is_neither_damage_nor_repaired(tmp_path: Path, milvus: str,
                                                                              moment: str) -> None:
    """A second `ctxrag ingest` paused (alive) while staging, or mid-swap: `kb check` is clean, `kb repair` leaves
    its staged copy alone and says so, readers see one version whole; let go, it finishes. Before: repair deleted a
    live writer's staged copy."""
    env, folder = _revise(tmp_path, milvus)
    gate = tmp_path / "gate"
    gate.mkdir()
    proc = _stop_replace(env, folder, moment, how=str(gate))
    try:
        _wait_paused(gate, proc)
        r = _run(env, "kb", "check", KB)
        assert r.returncode == 0, r.stdout + r.stderr
        r = _run(env, "kb", "repair", KB)
        assert r.returncode == 0 and "left alone, its writer is still running" in r.stdout, r.stdout + r.stderr
        version, _, staged = _whole(tmp_path, milvus)
        assert version == MOMENTS[moment] and staged > 0
    finally:
        (gate / "go").touch()
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 0, out + err
    version, n, staged = _whole(tmp_path, milvus)
    assert (version, staged) == ("revised", 0) and n == N_REVISED, n
    r = _run(env, "kb", "check", KB)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("how", ["paused", "killed"])
def test_a_new_document_half_written_by_another_process_is_in_flight_while_it_runs_and_repaired_once_it_died(
        tmp_path: Path, milvus: str, how: str) -> None:
    """A `ctxrag ingest` adding a new 50-chunk document stops after its first 5 chunk rows. Paused (alive): `kb check`
    exits 0 and lists it as in flight (the writer's pid), `kb repair` leaves it alone; let go, it finishes whole.
    Killed -9: check exits 1 naming the unfinished write, repair drops it as before and the next ingest adds it.
    Before: the row of a new document named no writer, so check called the live write damage and repair dropped
    it under the writer."""
    import socket

    env = process_env(tmp_path / "home", "milvus", milvus)
    folder = _long_document(tmp_path / "docs", "revised")  # no stored version: a new document, nothing staged
    gate = tmp_path / "gate"
    gate.mkdir()
    proc = _stop_replace(env, folder, "adding", how=str(gate) if how == "paused" else "kill")
    if how == "killed":
        out, err = proc.communicate(timeout=HANG_GUARD_S)
        assert proc.returncode == -signal.SIGKILL, out + err
        r = _run(env, "kb", "check", KB)
        assert r.returncode == 1 and "1 documents with an unfinished write" in r.stdout, r.stdout + r.stderr
        assert "in flight" not in r.stdout, r.stdout
        r = _run(env, "kb", "repair", KB)
        assert r.returncode == 0 and "dropped 1 half-written" in r.stdout, r.stdout + r.stderr
        assert "left alone" not in r.stdout, r.stdout
        assert _run(env, "kb", "check", KB).returncode == 0
        assert _run(env, "ingest", str(folder), "--kb", KB).returncode == 0  # the next ingest adds it again
    else:
        try:
            _wait_paused(gate, proc)
            r = _run(env, "kb", "check", KB)
            assert r.returncode == 0, r.stdout + r.stderr
            assert "in flight (a writer still running, not damage): " in r.stdout and "manual.md" in r.stdout
            assert "a new document, 5 of " in r.stdout, r.stdout
            assert f"writer pid {proc.pid} on {socket.gethostname()} running" in r.stdout, r.stdout
            r = _run(env, "kb", "repair", KB)
            assert r.returncode == 0 and "left alone, its writer is still running" in r.stdout, r.stdout + r.stderr
            assert "dropped 0 half-written" in r.stdout, r.stdout
        finally:
            (gate / "go").touch()
            out, err = proc.communicate(timeout=HANG_GUARD_S)
        assert proc.returncode == 0, out + err
    version, n, staged = _whole(tmp_path, milvus)
    assert (version, staged) == ("revised", 0) and n == 50, n
    r = _run(env, "kb", "check", KB)
    assert r.returncode == 0 and "in flight" not in r.stdout, r.stdout + r.stderr


WRITER_GRACE_S = 3.0
"""The writer grace period of the long-write test (``CTXRAG_MILVUS_WRITER_GRACE_S``): short, so the test outlives it."""


def _revised_import(path: Path, pages: int = 2, per_page: int = 10) -> Path:
    """A `ctxrag import` JSONL of `pages` new documents (their text says "revised", where `_STOP_AT` stops)."""
    import json

    import numpy as np

    rng = np.random.default_rng(3)
    with path.open("w", encoding="utf-8") as f:
        for i in range(pages * per_page):
            f.write(json.dumps({"text": f"Record {i} of the revised page {i // per_page}.", "source":
                                f"wiki://{i // per_page}", "vector": rng.normal(size=64).tolist()}) + "\n")
    return path


@pytest.mark.parametrize("host", ["this", "another"])
def test_a_bulk_import_running_longer_than_the_writer_grace_is_in_flight_while_its_writer_lives(
        tmp_path: Path, milvus: str, host: str) -> None:
    """Issue #43, fourth pass, still open: one `ctxrag import` batch (two new documents) stops after its first chunk
    rows, alive, and stays so for twice the writer grace period. Its writer on this host (probed by process) or on
    another (its heartbeat, beaten while the import runs): `kb check` exits 0 listing the documents in flight with
    the writer running, `kb repair` leaves them alone. This host's writer let go finishes both documents whole;
    the other host's writer killed -9 stops beating, so after the grace period opening the knowledge base (`kb
    check`) drops the two half-written documents, `kb repair` its heartbeat, and the next import adds them. Before: a write older than the grace
    period was taken as dead whatever its writer did, so check called a live import damage and repair deleted its
    documents under it."""
    import json
    import socket

    env = {**process_env(tmp_path / "home", "milvus", milvus), "CTXRAG_MILVUS_WRITER_GRACE_S": str(WRITER_GRACE_S)}
    path = _revised_import(tmp_path / "chunks.jsonl")
    node = "" if host == "this" else "node-b.elsewhere"
    gate = tmp_path / "gate"
    gate.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _STOP_AT, str(path), "adding", str(gate), node,
                             "import", str(path), "--kb", KB, "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_paused(gate, proc)
        time.sleep(2 * WRITER_GRACE_S)  # the write is now older than the grace period; its writer still runs
        r = _run(env, "kb", "check", KB)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "in flight (a writer still running, not damage): " in r.stdout and "wiki://1" in r.stdout, r.stdout
        assert f"writer pid {proc.pid} on {node or socket.gethostname()} running" in r.stdout, r.stdout
        r = _run(env, "kb", "repair", KB)
        assert r.returncode == 0 and "left alone, its writer is still running" in r.stdout, r.stdout + r.stderr
        assert "dropped 0 half-written" in r.stdout, r.stdout
        if host == "another":  # the other node dies: its heartbeat stops and ages out
            proc.kill()
            proc.communicate(timeout=HANG_GUARD_S)
            time.sleep(2 * WRITER_GRACE_S)
            r = _run(env, "kb", "check", KB)  # opening settles writes whose writer is gone for the grace period
            assert "dropped 2 half-written documents" in r.stderr and "in flight" not in r.stdout, r.stdout + r.stderr
            assert r.returncode == 0 and "0 documents" in r.stdout, r.stdout + r.stderr
            r = _run(env, "kb", "repair", KB)
            assert r.returncode == 0, r.stdout + r.stderr
            kb = _milvus_kb(tmp_path, milvus, "reader")
            try:
                assert kb.store.beats() == {} and kb.list_documents() == []  # the dead writer's heartbeat is gone
            finally:
                kb.close()
            assert _run(env, "import", str(path), "--kb", KB).returncode == 0  # the next import adds them again
    finally:
        (gate / "go").touch()
        out, err = proc.communicate(timeout=HANG_GUARD_S) if proc.returncode is None else ("", "")
    if host == "this":
        assert proc.returncode == 0, out + err
        assert json.loads(out.strip().splitlines()[-1])["chunks"] == 20, out
    kb = _milvus_kb(tmp_path, milvus, "reader")
    try:
        docs = kb.list_documents()
        assert [d.source for d in docs] == ["wiki://0", "wiki://1"] and [d.n_chunks for d in docs] == [10, 10]
        assert kb.store.beats() == {}  # a finished writer removes its heartbeat
    finally:
        kb.close()
    r = _run(env, "kb", "check", KB)
    assert r.returncode == 0 and "in flight" not in r.stdout, r.stdout + r.stderr
