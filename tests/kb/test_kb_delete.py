"""`ctxrag kb delete` while other processes write to, read from and serve the knowledge base (real processes).

The rules under test (docs/reliability.md, "Deleting a knowledge base"): delete takes the write lock (it waits for a
writer's commit in progress); a writer whose knowledge base was deleted fails with `KnowledgeBaseDeleted` instead of
silently creating a new, partial one; readers get that named error, never a raw `FileNotFoundError`, and never see a
half-deleted folder; a running server notices a deleted and re-created knowledge base and serves the new one."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from test_kb_concurrency import KB, _cli, _env, _search, _seed_kb, _serve
from ctxrag.testing.llm_server import HANG_GUARD_S

pytestmark = pytest.mark.slow  # real processes on one knowledge base: the full suite, not the fast lane


def _wait_for(predicate, what: str, procs: tuple[subprocess.Popen, ...] = (), timeout: float = HANG_GUARD_S) -> None:
    """Poll `predicate` until true; fail (naming `what`) if a watched process died first or after `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        for p in procs:
            assert p.poll() is None, f"process {p.args[-3:]} exited {p.returncode} before {what}"
        assert time.monotonic() < deadline, f"hang guard: no {what} after {timeout} s"
        time.sleep(0.05)


def _corpus(root: Path, n: int, tag: str) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"{tag}{i:02d}.md").write_text(f"# {tag} {i}\n\nFile {i} of {tag} about the {tag}word{i}.\n",
                                               encoding="utf-8")
    return root


_LOCK_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ctxrag.stores.engine.generations import GenerationStore
    gens = GenerationStore(Path(sys.argv[1]), "shared")
    with gens.write_lock():
        Path(sys.argv[2]).write_text("x")
        while not Path(sys.argv[3]).exists():
            time.sleep(0.05)
""")


def test_delete_waits_for_the_writer_and_the_ingest_never_recreates_the_kb(tmp_path: Path) -> None:
    """The issue's `kb delete` during `ctxrag ingest`: the ingest (waiting for the lock another writer holds) must
    not bring the deleted knowledge base back with part of its files, and a failure names the deletion."""
    home = tmp_path / "home"
    env = _env(home, "fake")
    seed = _corpus(tmp_path / "seed", 10, "seed")
    subprocess.run(_cli("ingest", str(seed), "--kb", KB), env=env, check=True, capture_output=True, timeout=HANG_GUARD_S)
    big = _corpus(tmp_path / "big", 60, "big")
    ready, release = tmp_path / "ready", tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, str(home / "kb" / KB), str(ready), str(release)],
                              env=env)
    ingest_err, delete_err = tmp_path / "ingest.err", tmp_path / "delete.err"
    try:
        _wait_for(ready.exists, "write lock taken by the holder", (holder,))
        with open(ingest_err, "w") as ie, open(delete_err, "w") as de:
            ingest = subprocess.Popen(_cli("ingest", str(big), "--kb", KB), env=env, stdout=subprocess.PIPE,
                                      stderr=ie, text=True)
            _wait_for(lambda: "waiting for the write lock" in ingest_err.read_text(), "ingest waiting", (ingest,))
            delete = subprocess.Popen(_cli("kb", "delete", KB, "-y"), env=env, stdout=subprocess.PIPE, stderr=de,
                                      text=True)
            # the delete must queue behind the writer holding the lock (before the fix it deleted at once)
            _wait_for(lambda: delete.poll() is not None or "waiting for the write lock" in delete_err.read_text(),
                      "delete waiting or done")
            assert delete.poll() is None, "kb delete did not wait for the writer holding the write lock"
            release.write_text("x")
            d_out, _ = delete.communicate(timeout=HANG_GUARD_S)
            i_out, _ = ingest.communicate(timeout=HANG_GUARD_S)
    finally:
        release.write_text("x")
        holder.wait(timeout=60)
    assert delete.returncode == 0, delete_err.read_text()
    assert "Traceback" not in ingest_err.read_text(), "ingest stderr:\n" + ingest_err.read_text()[-1500:]
    if ingest.returncode != 0:  # the delete came before (some of) its commits: a named error, nothing recreated
        assert f"knowledge base {KB!r} was deleted" in ingest_err.read_text(), ingest_err.read_text()[-2000:]
    else:  # it committed everything before the delete got the lock
        assert "60 added" in i_out
    assert not (home / "kb" / KB).exists(), sorted(p.name for p in (home / "kb" / KB).rglob("*"))
    r = subprocess.run(_cli("kb", "list"), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert KB not in r.stdout


_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ctxrag.errors import CtxragError
    from ctxrag.kb.local import KnowledgeBase
    kb = KnowledgeBase.open("shared")
    kb.add_texts([{"text": f"First batch note {i} about the walrus.", "source": f"note://a{i}"} for i in range(5)])
    Path(sys.argv[1]).write_text("x")
    while not Path(sys.argv[2]).exists():
        time.sleep(0.05)
    try:
        kb.add_texts([{"text": f"Second batch note {i} about the glacier.", "source": f"note://b{i}"} for i in range(5)])
    except CtxragError as e:
        print(f"named error {type(e).__name__}: {e}")
        sys.exit(3)
    print("wrote the second batch")
""")


@pytest.mark.parametrize("recreate", [False, True], ids=["deleted", "deleted-and-recreated"])
def test_writer_whose_kb_was_deleted_between_batches_fails_with_a_named_error(tmp_path: Path, recreate: bool) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    first, go = tmp_path / "first", tmp_path / "go"
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(first), str(go)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    _wait_for(first.exists, "the writer's first batch", (writer,))
    r = subprocess.run(_cli("kb", "delete", KB, "-y"), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stderr
    if recreate:
        other = _corpus(tmp_path / "other", 2, "other")
        r = subprocess.run(_cli("ingest", str(other), "--kb", KB), env=env, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
        assert r.returncode == 0, r.stderr
    go.write_text("x")
    out, err = writer.communicate(timeout=HANG_GUARD_S)
    assert writer.returncode == 3, f"rc {writer.returncode}\n{out}\n{err[-3000:]}"
    assert "KnowledgeBaseDeleted" in out and f"knowledge base {KB!r} was deleted" in out, out
    if recreate:  # the new knowledge base holds only its own two files
        r = subprocess.run(_cli("doc", "list", "--kb", KB), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert "other00.md" in r.stdout and "note://" not in r.stdout, r.stdout
    else:
        assert not (home / "kb" / KB).exists(), sorted(p.name for p in (home / "kb" / KB).rglob("*"))


_READER = textwrap.dedent("""
    import sys, traceback
    from pathlib import Path
    from ctxrag.errors import KnowledgeBaseNotFound
    from ctxrag.kb.local import KnowledgeBase
    progress, stop, long_lived = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "long"
    searches = 0
    try:
        kb = KnowledgeBase.open("shared", create=False) if long_lived else None
        while not stop.exists():
            k = kb or KnowledgeBase.open("shared", create=False)
            k.search("trapdoor", k=1, mode="bm25")
            k.search("trapdoor", k=1, mode="dense")
            k.chunks.get_chunks([c.chunk_id for c in k.store.iter_chunks()][:1])
            if not long_lived:
                k.close()
            searches += 1
            progress.write_text(str(searches))
        print(f"no error after {searches} searches")
    except KnowledgeBaseNotFound as e:  # KnowledgeBaseDeleted is one
        print(f"{type(e).__name__} after {searches} searches: {e}")
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
""")


def _count(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


@pytest.mark.parametrize("attempt", range(4))
def test_delete_with_readers_open_leaves_no_half_deleted_folder(tmp_path: Path, attempt: int) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    _seed_kb(tmp_path, env)
    stop = tmp_path / "stop"
    readers, progress = [], []
    for i, kind in enumerate(("long", "long", "open", "open")):
        progress.append(tmp_path / f"progress{i}")
        readers.append(subprocess.Popen([sys.executable, "-c", _READER, str(progress[-1]), str(stop), kind], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        _wait_for(lambda: all(_count(p) >= 3 for p in progress), "every reader searching", tuple(readers))
        r = subprocess.run(_cli("kb", "delete", KB, "-y"), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
        # each reader either stops on an error or keeps "finding" the deleted knowledge base for 5 more rounds
        after = [_count(p) for p in progress]
        _wait_for(lambda: all(p.poll() is not None or _count(f) >= a + 5 for p, f, a in zip(readers, progress, after)),
                  "every reader stopped or searched 5 more times")
    finally:
        stop.write_text("x")
        outs = [p.communicate(timeout=HANG_GUARD_S) for p in readers]
    assert r.returncode == 0, r.stderr
    assert not (home / "kb" / KB).exists(), sorted(str(p) for p in (home / "kb" / KB).rglob("*"))
    assert [p.name for p in (home / "kb").iterdir()] == [], "left behind a renamed folder"
    for p, (out, err) in zip(readers, outs):
        assert p.returncode == 0, err[-3000:]
        assert "KnowledgeBaseDeleted" in out or "KnowledgeBaseNotFound" in out, out


def test_running_server_notices_a_deleted_and_recreated_kb(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, "fake")
    _seed_kb(tmp_path, env)
    new = tmp_path / "new"
    new.mkdir()
    (new / "fresh.md").write_text("# Fresh\n\nThe fresh file mentions a zeppelinquark.\n", encoding="utf-8")
    with _serve(home, env) as url, httpx.Client() as client:
        assert "seed" in _search(client, url, "trapdoor")[1]
        r = subprocess.run(_cli("kb", "delete", KB, "-y"), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert r.returncode == 0, r.stderr
        resp = client.post(f"{url}/search/invoke", json={"input": "trapdoor"}, timeout=HANG_GUARD_S)
        assert resp.status_code == 404 and resp.json()["error"] == "KnowledgeBaseDeleted", resp.text
        r = subprocess.run(_cli("ingest", str(new), "--kb", KB), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert r.returncode == 0, r.stderr
        status, found = _search(client, url, "zeppelinquark")
        assert status == 200 and found[:1] == ["fresh"], (status, found)
        assert "seed" not in _search(client, url, "trapdoor")[1]
        assert client.get(f"{url}/health", timeout=30).status_code == 200
