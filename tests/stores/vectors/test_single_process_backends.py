"""Chroma and Milvus Lite allow one process at a time per store: a second process (here a real `ctxrag ingest`) gets
a one-line error naming the process that has the store open, and succeeds once that process is gone. Several
objects in one process share the store as before. `fake` embeddings; the locking is what is tested."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, Settings
from ctxrag.testing.llm_server import HANG_GUARD_S

_NEEDS = {"chroma": "chromadb", "milvus": "milvus_lite"}
BACKENDS = [pytest.param(b, marks=pytest.mark.skipif(importlib.util.find_spec(m) is None, reason=f"{m} missing"))
            for b, m in _NEEDS.items()]

_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ctxrag.kb.local import KnowledgeBase
    kb = KnowledgeBase.open("solo", create=False)
    len(kb.dense_index())  # opens the backend
    Path(sys.argv[1]).write_text("x")
    time.sleep(120)
""")


def _env(home: Path, backend: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_")}
    env.update({"CTXRAG_HOME": str(home), "CTXRAG_DENSE_BACKEND": backend, "CTXRAG_EMBEDDINGS__PROVIDER": "fake",
                "CTXRAG_LLM__PROVIDER": "none"})
    return env


@pytest.mark.slow  # real ctxrag processes: the full suite
@pytest.mark.parametrize("backend", BACKENDS)
def test_second_process_is_refused_with_the_holder_named(tmp_path: Path, backend: str) -> None:
    home = tmp_path / "home"
    settings = Settings(home=home, dense_backend=backend, embeddings=EmbeddingSettings(provider="fake"))
    kb = KnowledgeBase.open("solo", settings)
    kb.add_texts([{"text": "The heron nests by the river.", "source": "mem://heron"}])
    same_process = KnowledgeBase.open("solo", settings)  # a second object in this process is fine
    assert len(same_process.dense_index()) == 1
    same_process.close()
    kb.close()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "egret.md").write_text("# Egret\n\nThe egret wades in the shallows.\n", encoding="utf-8")
    env = _env(home, backend)
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(ready)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the holder did not open the store"
            time.sleep(0.1)
        r = subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "ingest", str(corpus), "--kb", "solo"], env=env,
                           capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert r.returncode == 1, r.stdout + r.stderr
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert lines and f"open in another process (pid {holder.pid}" in lines[0] and "one process at a time" in lines[0]
        assert "Traceback" not in r.stderr
    finally:
        holder.kill()
        holder.wait()
    r = subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "ingest", str(corpus), "--kb", "solo"], env=env,
                       capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert r.returncode == 0, r.stdout + r.stderr
    kb = KnowledgeBase.open("solo", settings)
    assert len(kb.dense_index()) == 2 and kb.stats()["chunks"] == 2
    kb.close()
