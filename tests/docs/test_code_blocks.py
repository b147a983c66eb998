"""Every fenced code block of README.md and the guide (docs/, except the generated benchmark pages) runs here, or is
marked as something that cannot run in a test.

Why a small collector instead of pytest-markdown-docs or phmdoctest: those run Python blocks only (bash blocks, which
are most of our examples, would still need a runner), and they mark blocks through the fence's info string, which
GitHub and MkDocs then show or mis-highlight. Here a block is marked by an HTML comment on the line above it, which
neither renders:

    <!-- docs-test: run -->                 the default: runs (the comment may say why it matters)
    <!-- docs-test: llm -->                 needs the real local model: runs only in the llm lane (-m llm)
    <!-- docs-test: llm-local -->           the same, with the in-process model (it shows what only that model does)
    <!-- docs-test: external (reason) -->   needs an external service, a data set, or has placeholders (<your-kb>)
    <!-- docs-test: service (reason) -->    starts a long-running server
    <!-- docs-test: skip (reason) -->       not to be run by a test (set-up, the test suite itself)

``bash`` blocks run as one script (``set -euo pipefail``) and ``python`` blocks in a fresh interpreter, both in a
temporary folder that links the repository's top-level files (so ``examples/sample_corpus`` resolves), with the test's
private ``CTXRAG_HOME`` and contexts off (the suite's default), ``ctxrag`` and ``python`` being this checkout's. An
``llm`` block, bash or python, talks to the test run's one ``llama_cpp.server`` (``llama_server_url``) through the
settings (``CTXRAG_LLM__PROVIDER=openai``, ``CTXRAG_LLM__BASE_URL``, a short ``CTXRAG_LLM__MAX_TOKENS``) that
``make_chat_model()`` and every ``ctxrag`` command read, rather than each loading the GGUF in its own process; the in-process path of ``make_chat_model()`` is
tested in ``tests/models/test_chat.py``. An ``llm-local`` block shows the in-process model (a tool-call round trip
with an assistant message without content, which llama_cpp.server refuses), a mechanism, so it runs on the 0.5B: a
python one runs in the test's own interpreter (its output captured, in the temporary folder), where
``make_chat_model()`` finds the run's one in-process load of it (``small_chat_model``) instead of loading a GGUF
again; a bash one runs in its own process.
``toml`` blocks are parsed and validated against ``Settings``; ``json`` blocks parsed. Blocks without a language,
``text`` and ``console`` are output, not code.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*([\w-]+)\s*(?:\((.*)\))?\s*-->\s*$")
FENCE_OPEN = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
KINDS = {"run", "llm", "llm-local", "external", "service", "skip"}
NEEDS_REASON = {"external", "service", "skip"}
RUNNABLE = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python", "toml": "toml",
            "json": "json"}
PLACEHOLDER = re.compile(r"<(?:your|path|[a-z]+-)[\w-]*>|<[A-Z][A-Z_]+>")
BLOCK_MAX_TOKENS = "64"
"""The replies' length limit for llm blocks (``CTXRAG_LLM__MAX_TOKENS``; a block or a command that sets its own keeps
it): a block passes when it runs, so its answers need not be whole, and each token costs time on two cores."""
TIMEOUT_S = 3000
"""A hang guard, not a speed limit (a busy machine makes a block slow, not wrong): under pytest-timeout's hour, so the
block's own commands are killed with its output shown."""


@dataclass(frozen=True)
class Block:
    path: Path
    line: int       # 1-based line of the opening fence
    lang: str
    kind: str
    reason: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def doc_files() -> list[Path]:
    files = [REPO / "README.md"]
    for path in sorted((REPO / "docs").rglob("*.md")):
        if "benchmarks" not in path.relative_to(REPO / "docs").parts:
            files.append(path)
    return files


def collect(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opened = FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence, lang = opened.group(1), opened.group(2), opened.group(3).lower()
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        above = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(above)
        kind, reason = (marker.group(1), (marker.group(2) or "").strip()) if marker else ("run", "")
        blocks.append(Block(path, start + 1, lang, kind, reason, "\n".join(body) + "\n"))
    return blocks


ALL_BLOCKS = [b for path in doc_files() for b in collect(path)]
CODE_BLOCKS = [b for b in ALL_BLOCKS if b.lang in RUNNABLE]


def _params() -> list:
    params = []
    for block in CODE_BLOCKS:
        marks = []
        if block.kind in ("llm", "llm-local"):
            marks.append(pytest.mark.llm)
        elif block.kind != "run":
            marks.append(pytest.mark.skip(reason=f"docs-test: {block.kind} ({block.reason})"))
        if RUNNABLE[block.lang] in ("bash", "python"):
            marks.append(pytest.mark.slow)
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def test_blocks_are_found() -> None:
    readme = [b for b in CODE_BLOCKS if b.path.name == "README.md"]
    assert len(readme) >= 6 and {"bash", "python", "toml"} <= {b.lang for b in readme}


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.id for b in ALL_BLOCKS])
def test_marker_is_known_and_says_why(block: Block) -> None:
    assert block.kind in KINDS, f"{block.id}: unknown docs-test kind {block.kind!r} (one of {sorted(KINDS)})"
    if block.kind in NEEDS_REASON:
        assert block.reason, f"{block.id}: 'docs-test: {block.kind}' needs a reason in brackets"
    if block.kind in ("run", "llm", "llm-local") and block.lang in RUNNABLE:
        found = PLACEHOLDER.findall(block.code)
        assert not found, f"{block.id}: placeholder(s) {found} in a block that runs; mark it external"


def _workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder linking the repository's top-level entries, and the environment with this checkout's tools first."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in {".git", ".venv", "site"}:
            (work / entry.name).symlink_to(entry)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, command in (("ctxrag", f'"{sys.executable}" -m ctxrag.cli.main'), ("python", f'"{sys.executable}"'),
                          ("python3", f'"{sys.executable}"')):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\nexec {command} "$@"\n', encoding="utf-8")
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)}
    return work, env


def _shared_model_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """For a block of the llm lane: every ``ctxrag`` command and ``make_chat_model()`` call it runs talks to the test
    run's one ``llama_cpp.server`` (the session ``llama_server_url``) instead of loading the GGUF in its own process."""
    from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS

    return {"CTXRAG_LLM__PROVIDER": "openai", "CTXRAG_LLM__MODEL": SERVER_MODEL_ALIAS,
            "CTXRAG_LLM__BASE_URL": request.getfixturevalue("llama_server_url"),
            "CTXRAG_LLM__TIMEOUT": str(HANG_GUARD_S), "CTXRAG_LLM__MAX_TOKENS": BLOCK_MAX_TOKENS}


@pytest.mark.parametrize("block", _params())
def test_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest,
                    record_load: Callable[[str], None]) -> None:
    runner = RUNNABLE[block.lang]
    if runner == "json":
        json.loads(block.code)
        return
    if runner == "toml":
        from ctxrag.settings import Settings

        data = tomllib.loads(block.code)
        Settings(**data)
        return
    work, env = _workdir(tmp_path)
    script = tmp_path / ("block.sh" if runner == "bash" else "block.py")
    if block.kind == "llm":
        env.update(_shared_model_env(request))
    elif block.kind == "llm-local" and runner == "python":
        _run_in_this_interpreter(block, work, request)
        return
    elif block.kind == "llm-local":
        env["CTXRAG_LLM__MODEL_PATH"] = str(request.getfixturevalue("small_model_path"))
        record_load(f"{Path(env['CTXRAG_LLM__MODEL_PATH']).name} in-process in the {block.id} block's own interpreter")
    if runner == "bash":
        script.write_text("set -euo pipefail\n" + block.code, encoding="utf-8")
        argv = ["bash", str(script)]
    else:
        script.write_text(block.code, encoding="utf-8")
        argv = [sys.executable, str(script)]
    # its own session, so a timeout ends the commands the block started too
    proc = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"{block.id} ({runner}) ran past {TIMEOUT_S} s\n--- stdout\n{stdout[-3000:]}")
    assert proc.returncode == 0, (f"{block.id} ({runner}) exited {proc.returncode}\n--- code\n{block.code}"
                                  f"--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-5000:]}")


def _run_in_this_interpreter(block: Block, work: Path, request: pytest.FixtureRequest) -> None:
    """Run a python ``llm-local`` block as a script (``__name__ == "__main__"``) in this process, in ``work``, with
    the in-process model this process already holds (``small_chat_model``: the settings point ``make_chat_model()``
    at the same file and n_ctx, so it reuses that load; conftest counts any other)."""
    import contextlib
    import io

    from ctxrag.settings import get_settings

    request.getfixturevalue("small_chat_model")
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("CTXRAG_LLM__MODEL_PATH", str(request.getfixturevalue("small_model_path")))
    get_settings.cache_clear()
    monkeypatch.chdir(work)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.code, block.id, "exec"), {"__name__": "__main__"})  # noqa: S102 - the docs' own code
    except Exception as exc:  # noqa: BLE001 - the block's failure, shown with its code and output
        raise AssertionError(f"{block.id} (python, in-process) raised {exc!r}\n--- code\n{block.code}"
                             f"--- stdout\n{out.getvalue()[-3000:]}") from exc


def test_collector_reads_markers(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("text\n\n<!-- docs-test: external (a server; <host> placeholder) -->\n```bash\nctxrag x\n```\n\n"
                    "- item:\n\n  ```python\n  print(1)\n  ```\n\n```\nplain output\n```\n", encoding="utf-8")
    blocks = collect(page)
    assert [(b.lang, b.kind, b.reason, b.code) for b in blocks] == [
        ("bash", "external", "a server; <host> placeholder", "ctxrag x\n"),
        ("python", "run", "", "print(1)\n"),
        ("", "run", "", "plain output\n"),
    ]
