"""Clean-up never deletes a file an open reader uses: a reader process keeps the index objects of the generation it
opened and opens every file of that generation again and again, while this process commits many times (the merge
policy merges) and a real `ctxrag kb optimize` process merges everything. The reader's results never change and its
live searches follow the newest generation; once it exits, or is killed with SIGKILL, the next clean-up removes what
only its generation used. Real FAISS, BM25, SQLite, flock and processes; `fake` embeddings."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kb_processes import cli, process_env

from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, Settings
from ctxrag.stores.engine.segments import referenced_segments
from ctxrag.testing.llm_server import HANG_GUARD_S

KB = "conf"  # the name process_env's callers use
WORDS = ["amberquartz", "bluefjord", "copperlynx", "dustyorchid", "emberflint", "frostgarnet", "glacierwren"]

_READER = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from ctxrag.kb.local import KnowledgeBase
    home, stop, ready = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    words = sys.argv[4].split(",")
    kb = KnowledgeBase.open("conf", create=False)
    pinned = dict(kb.indexes)  # what a retriever built now holds on to
    gen = kb.snapshots.snapshot.generation
    vectors = [kb.embeddings.embed_query(w) for w in words]

    def results(indexes):
        return [[indexes["bm25"].search(w, 3) for w in words],
                [[c for c, _ in indexes["dense"].search(v, 3)] for v in vectors]]

    first = results(pinned)
    Path(str(ready) + ".tmp").write_text(json.dumps({"generation": gen, "pid": os.getpid()}))
    os.replace(str(ready) + ".tmp", ready)
    rounds = changed = 0
    while not stop.exists():
        again = kb.snapshots.load_generation(gen, kb.snapshots.store)  # every file of the generation, opened now
        changed += results(pinned) != first
        changed += results(again) != first
        kb.search(words[rounds % len(words)], k=3, mode="hybrid")  # the live view: the newest generation
        rounds += 1
    live = [Path(d.metadata["source"]).name for d in kb.search(sys.argv[5], k=1, mode="bm25")]
    print(json.dumps({"rounds": rounds, "changed": changed, "live": live,
                      "live_generation": kb.snapshots.snapshot.generation}))
""")


def _note(folder: Path, i: int, word: str) -> None:
    (folder / f"note{i:03d}.md").write_text(f"# Note {i}\n\nThis note is about {word}.\n", encoding="utf-8")


def _start_reader(tmp_path: Path, env: dict[str, str], last_word: str) -> tuple[subprocess.Popen, int, Path]:
    stop, ready = tmp_path / "stop", tmp_path / "ready"
    stop.unlink(missing_ok=True)
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", _READER, str(tmp_path), str(stop), str(ready), ",".join(WORDS),
                             last_word], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + HANG_GUARD_S  # a guard against a hang, not a timing assertion
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"reader did not start: {proc.communicate()[1][-3000:]}")
        time.sleep(0.05)
    return proc, int(json.loads(ready.read_text())["generation"]), stop


def _segments(kb: KnowledgeBase, gen: int) -> set[str]:
    return {s for name in ("dense", "bm25") for s in referenced_segments(kb.generations.gen_dir(gen) / name)}


def _write_many(kb: KnowledgeBase, corpus: Path, start: int, n: int, env: dict[str, str]) -> None:
    """`n` one-note commits (the merge policy merges on the way), then `ctxrag kb optimize` in a process of its
    own, then one more commit."""
    for i in range(start, start + n):
        _note(corpus, i, f"word{i}x")
        kb.ingest([corpus], progress=False)
    r = subprocess.run(cli("kb", "optimize", KB), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr[-3000:]
    _note(corpus, start + n, f"word{start + n}x")
    kb.ingest([corpus], progress=False)


def test_clean_up_keeps_what_a_reader_process_uses_until_it_exits_or_is_killed(tmp_path: Path) -> None:
    env = process_env(tmp_path, "local", None)
    kb = KnowledgeBase.open(KB, Settings(home=tmp_path, embeddings=EmbeddingSettings(provider="fake")))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, w in enumerate(WORDS):
        _note(corpus, i, w)
        if i % 2:
            kb.ingest([corpus], progress=False)  # a few segments
    kb.ingest([corpus], progress=False)

    # a reader that exits normally
    reader, pinned_gen, stop = _start_reader(tmp_path, env, "word24x")
    pinned = _segments(kb, pinned_gen)
    try:
        _write_many(kb, corpus, 10, 14, env)
        current = kb.generation
        kept_for_others = _segments(kb, current) | _segments(kb, current - 1)
        assert pinned - kept_for_others, "the writes should have merged the reader's segments away"
        assert kb.generations.gen_dir(pinned_gen).is_dir()
        assert pinned <= {p.name for p in kb.generations.segments_dir.iterdir()}
    finally:
        stop.write_text("x")
        out, err = reader.communicate(timeout=HANG_GUARD_S)
    assert reader.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["rounds"] > 0 and summary["changed"] == 0
    assert summary["live"] == ["note024.md"] and summary["live_generation"] == current
    _note(corpus, 30, "word30x")
    kb.ingest([corpus], progress=False)  # the next clean-up: the reader is gone
    assert not kb.generations.gen_dir(pinned_gen).exists()
    left = {p.name for p in kb.generations.segments_dir.iterdir()}
    assert left == _segments(kb, kb.generation) | _segments(kb, kb.generation - 1)

    # a reader killed with SIGKILL
    reader, pinned_gen, stop = _start_reader(tmp_path, env, "word30x")
    pinned = _segments(kb, pinned_gen)
    try:
        _write_many(kb, corpus, 31, 3, env)
        assert kb.generations.gen_dir(pinned_gen).is_dir()
        assert pinned <= {p.name for p in kb.generations.segments_dir.iterdir()}
    finally:
        os.kill(reader.pid, signal.SIGKILL)
        reader.communicate(timeout=HANG_GUARD_S)
    _note(corpus, 40, "word40x")
    kb.ingest([corpus], progress=False)
    assert not kb.generations.gen_dir(pinned_gen).exists()
    left = {p.name for p in kb.generations.segments_dir.iterdir()}
    assert left == _segments(kb, kb.generation) | _segments(kb, kb.generation - 1)
    assert not [p for p in (kb.root / "readers").iterdir() if p.name.startswith(f"gen-{pinned_gen:06d}.")]
    kb.close()
