"""Scale-out on one Milvus: two `ctxrag serve` processes (each with its own, otherwise empty ``CTXRAG_HOME``) on one
milvus-lite server (``CTXRAG_STORE=milvus``). A note added through one server is found through the other at once;
3 concurrent `ctxrag ingest` processes x 20 files: 60/60 found through both servers."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from milvus_lite_server import HAVE_MILVUS_LITE, SKIP_REASON, start_milvus_lite_server

pytestmark = [pytest.mark.skipif(not HAVE_MILVUS_LITE, reason=SKIP_REASON),
              pytest.mark.slow]  # real processes on one Milvus: the full suite, not the fast lane

from kb_processes import KB, cli, process_env, write_word_files  # noqa: E402
from ctxrag.testing.llm_server import HANG_GUARD_S  # noqa: E402
from ctxrag.testing.processes import stop_process  # noqa: E402


@contextmanager
def serve(home: Path, env: dict[str, str]) -> Iterator[str]:
    from ctxrag.testing.llm_server import free_port

    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    log_path = home / f"serve-{port}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cli("serve", "--kb", KB, "--port", str(port), "--mode", "hybrid"), env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 180
            while True:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "ctxrag serve did not start"
                time.sleep(0.3)
            yield url
        finally:
            stop_process(proc)


def search(url: str, query: str) -> list[str]:
    r = httpx.post(f"{url}/search/invoke", json={"input": query}, timeout=HANG_GUARD_S)
    assert r.status_code == 200, r.text[-2000:]
    return [d["metadata"]["source"] for d in r.json()["output"]]


@pytest.fixture
def milvus(tmp_path: Path) -> Iterator[str]:
    with start_milvus_lite_server(tmp_path / "milvus-server") as uri:
        yield uri


def test_two_servers_on_one_milvus_see_each_others_writes(tmp_path: Path, milvus: str) -> None:
    env_a, env_b = (process_env(tmp_path / f"node-{n}", "milvus", milvus) for n in "ab")
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "seed.md").write_text("# Seed\n\nThe seed file mentions a trapdoor.\n", encoding="utf-8")
    subprocess.run(cli("ingest", str(seed), "--kb", KB), env=env_a, check=True, capture_output=True, timeout=HANG_GUARD_S)
    with serve(tmp_path / "node-a", env_a) as a, serve(tmp_path / "node-b", env_b) as b:
        assert any(s.endswith("seed.md") for s in search(b, "trapdoor"))
        r = httpx.post(f"{a}/notes/invoke", json={"input": {"action": "add", "text": "The gazebo key is blue."}},
                       timeout=HANG_GUARD_S)
        assert r.status_code == 200, r.text
        assert any(s.startswith("note://") for s in search(b, "gazebo key"))  # at once: no refresh, no wait
        folders, expected = write_word_files(tmp_path / "corpus")
        procs = [subprocess.Popen(cli("ingest", str(f), "--kb", KB), env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for f, env in zip(folders, [env_a, env_b, env_a])]
        for proc in procs:
            out, err = proc.communicate(timeout=HANG_GUARD_S)
            assert proc.returncode == 0 and "0 failed" in out, f"{out[-1500:]}\n{err[-3000:]}"
        for url in (a, b):
            found = [stem for stem, word in expected.items() if any(Path(s).stem == stem for s in search(url, word))]
            assert len(found) == 60, sorted(set(expected) - set(found))
