"""Helpers for tests that run ctxrag as real processes on one shared knowledge base (the store conformance suite,
the Milvus scale-out test): the word corpus, the `ctxrag` command line and its environment; and `write_corpus`, a
folder of named texts, which the knowledge-base suites share."""
from __future__ import annotations

import os
import sys
from pathlib import Path

KB = "conf"

WORDS = ("pineapple violin glacier lantern walrus cathedral saxophone meteor cactus harbor blizzard tortoise volcano "
         "compass orchid falcon dynamite igloo jellyfish kangaroo lighthouse mushroom necklace octopus parachute "
         "quicksand rhubarb scarecrow trombone umbrella vineyard waterfall xylophone yogurt zeppelin avalanche bagpipe "
         "chimney dolphin elevator flamingo gondola hammock iceberg jasmine kayak lemonade marathon nightingale "
         "origami pyramid quiver raccoon sombrero tornado unicorn vulture windmill yacht zucchini").split()


def write_corpus(folder: Path, docs: dict[str, str]) -> Path:
    """`folder` (created) holding one file per name in `docs` with its text; returns `folder`."""
    folder.mkdir(parents=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def write_word_files(root: Path, n_procs: int = 3, per_proc: int = 20) -> tuple[list[Path], dict[str, str]]:
    """One folder per process, one single-chunk file per word; returns the folders and file stem -> word."""
    folders, expected = [], {}
    for p in range(n_procs):
        folder = root / f"proc{p}"
        folder.mkdir(parents=True)
        for i in range(per_proc):
            word, stem = WORDS[p * per_proc + i], f"f{p}_{i:02d}"
            (folder / f"{stem}.md").write_text(f"# File {stem}\n\nThis file talks about the {word}.\n", encoding="utf-8")
            expected[stem] = word
        folders.append(folder)
    return folders, expected


def process_env(home: Path, where: str, uri: str | None) -> dict[str, str]:
    """The environment of a ctxrag process on knowledge base `KB`: ``local`` under `home`, or in Milvus at `uri`;
    fake embeddings, no chat model, no contexts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE"}
    env.update({"CTXRAG_HOME": str(home), "CTXRAG_LLM__PROVIDER": "none", "CTXRAG_EMBEDDINGS__PROVIDER": "fake",
                "CTXRAG_CONTEXTUALIZE": "false", "PYTHONUNBUFFERED": "1"})
    if where != "local":
        env.update({"CTXRAG_STORE": "milvus", "CTXRAG_MILVUS_URI": str(uri)})
    return env


def cli(*args: str) -> list[str]:
    """The `ctxrag` command line with this interpreter."""
    return [sys.executable, "-m", "ctxrag.cli.main", *args]


def run_cli(args: list[str], env: dict[str, str], *, process: bool) -> tuple[int, str, str]:
    """Run ``ctxrag *args`` with environment `env`; return (exit code, stdout, stderr).

    ``process=True``: a real ``python -m ctxrag.cli.main`` process (what a user runs; it pays the import each time).
    ``process=False``: the same command through Click's runner in this process, for the fast lane: the variables of
    `env` that start with ``CTXRAG_`` replace this process's ``CTXRAG_*`` for the call, and an exception the command
    did not handle is appended to stderr as the traceback a real process would print."""
    import subprocess
    import traceback

    if process:
        from ctxrag.testing.llm_server import HANG_GUARD_S

        r = subprocess.run([sys.executable, "-m", "ctxrag.cli.main", *args], env=env, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
        return r.returncode, r.stdout, r.stderr
    from typer.testing import CliRunner

    from ctxrag.cli.main import app
    from ctxrag.settings import get_settings

    names = {k for k in os.environ if k.startswith("CTXRAG_")} | {k for k in env if k.startswith("CTXRAG_")}
    overrides: dict[str, str | None] = {k: env.get(k) for k in names}
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, args, env=overrides)
    finally:
        get_settings.cache_clear()
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return result.exit_code, result.stdout, stderr
