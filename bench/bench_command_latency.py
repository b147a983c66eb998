"""How long ctxrag's commands take as whole processes: import, ``--help``, a cold ``search`` (English and Chinese,
a repeated query and a new one) and the first token of ``ask``, each run several times (min / median / max), for the
code under test and, when given, an older version in the same run (``--before REF``: a git commit or branch, exported
with ``git archive``, or a folder holding an older ``src``-style tree, put first on PYTHONPATH).

Every run is a fresh ``python`` process (nothing cached in memory; the OS file cache is warm after the first run).
The knowledge base is the shipped demo corpus ingested without contexts into a temporary home. A repeated query finds
its vector in the embedding cache; a new query (a fresh word appended per run) runs the embedding model too. The row
``import langchain_core.retrievers`` is the floor LangChain sets: every ctxrag retriever is a `BaseRetriever`, and
importing that module brings langsmith's tracing with it. The load average before and after each command is
recorded, since a loaded machine stretches every number.

    python bench/bench_command_latency.py --runs 5 --before db72bc2
    python bench/bench_command_latency.py --runs 3 --ask       # also ask's first token (loads the real local model)
"""
from __future__ import annotations

import argparse
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import Table, write_page_data  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EN = "What is the default port?"
ZH = "星河知识库的默认端口是多少？"
COMMANDS = {
    "import KnowledgeBase": ["-c", "from ctxrag import KnowledgeBase"],
    "ctxrag --help": ["-m", "ctxrag.cli.main", "--help"],
    "cold search (English)": ["-m", "ctxrag.cli.main", "search", EN, "--kb", "bench", "-k", "3"],
    "cold search (Chinese)": ["-m", "ctxrag.cli.main", "search", ZH, "--kb", "bench", "-k", "3"],
    "cold search, new query (English)": ["-m", "ctxrag.cli.main", "search", EN + " {fresh}", "--kb", "bench", "-k", "3"],
    "cold search, new query (Chinese)": ["-m", "ctxrag.cli.main", "search", ZH + "{fresh}", "--kb", "bench", "-k", "3"],
}
FLOOR = ("import langchain_core.retrievers", ["-c", "import langchain_core.retrievers"])


def _env(src: Path, home: Path, model: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE"}
    env.update(PYTHONPATH=str(src), CTXRAG_HOME=str(home), CTXRAG_CONTEXTUALIZE="false",
               CTXRAG_LLM__MAX_TOKENS="16")
    if model is not None:
        env["CTXRAG_LLM__MODEL_PATH"] = str(model)  # the same GGUF file for every variant: nothing assembled
    return env


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(args: list[str], env: dict[str, str]) -> float:
    return _timed(args, env)[0]


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one process; CPU time is what a busy machine stretches least."""
    args = [a.replace("{fresh}", secrets.token_hex(4)) for a in args]  # a query never seen: no cached vector
    cpu0, t0 = _cpu_of_children(), time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - t0, _cpu_of_children() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"{args} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed, cpu


def _row(label: str, variant: str, runs: list[tuple[float, float]]) -> list[object]:
    walls, cpus = [w for w, _ in runs], [c for _, c in runs]
    return [label, variant, round(min(walls), 2), round(statistics.median(walls), 2), round(max(walls), 2),
            round(min(cpus), 2) if cpus[0] is not None else "", len(runs)]


def _first_token(env: dict[str, str]) -> float:
    """Seconds from starting ``ctxrag ask`` to the first byte of its answer on stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ctxrag.cli.main", "ask", ZH, "--kb", "bench"], env=env,
                            cwd=tempfile.gettempdir(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    first = proc.stdout.read(1)
    elapsed = time.perf_counter() - t0
    proc.communicate()
    if not first or proc.returncode != 0:
        raise SystemExit(f"ctxrag ask failed ({proc.returncode})")
    return elapsed


def _source(before: str, into: Path) -> Path:
    """The older version's ``src`` folder: `before` itself when it is a folder, else exported from git at that ref."""
    if Path(before).is_dir():
        return Path(before).resolve()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", before, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", help="an older version to time in the same run: a git ref, or a src folder")
    parser.add_argument("--ask", action="store_true", help="also time ask's first token with the real local model")
    parser.add_argument("--ask-runs", type=int, default=3, help="runs of ask (each loads the model; at most --runs)")
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args()

    before = _source(args.before, Path(tempfile.mkdtemp(prefix="ctxrag-before-"))) if args.before else None
    variants = [("this commit", ROOT / "src")] + ([(f"before ({args.before})", before)] if before else [])
    model = None
    if args.ask:
        sys.path.insert(0, str(ROOT / "src"))
        from ctxrag.models.gguf import local_model_path

        model = local_model_path(progress=False)
    # one home per variant, each knowledge base written by its own code (an older version need not read a newer
    # storage format)
    homes = {src: Path(tempfile.mkdtemp(prefix="ctxrag-latency-")) for _, src in variants}
    setup = _env(ROOT / "src", homes[ROOT / "src"], model)
    corpus = ROOT / "src" / "ctxrag" / "resources" / "demo" / "sample_corpus"
    for _, src in variants:  # ingest, then warm the OS file cache and jieba's dictionary cache once per variant
        _time(["-m", "ctxrag.cli.main", "ingest", str(corpus), "--kb", "bench"], _env(src, homes[src], model))
        _time(COMMANDS["cold search (Chinese)"], _env(src, homes[src], model))

    rows, loads = [], []
    commands = dict(COMMANDS)
    for label, argv in commands.items():
        for variant, src in variants:
            env = _env(src, homes[src], model)
            loads.append(_load())
            runs = [_timed(argv, env) for _ in range(args.runs)]
            loads.append(_load())
            rows.append(_row(label, variant, runs))
            print(rows[-1], "load", loads[-1], flush=True)
    loads.append(_load())
    runs = [_timed(FLOOR[1], setup) for _ in range(args.runs)]
    loads.append(_load())
    rows.append(_row(FLOOR[0], "LangChain (floor)", runs))
    print(rows[-1], "load", loads[-1], flush=True)
    if args.ask:
        ask_runs = max(1, min(args.runs, args.ask_runs))
        for variant, src in variants:
            env = _env(src, homes[src], model)
            cases = [("ask, first token", {})]
            if src == ROOT / "src":  # this commit: the model loaded by the command itself, then the warm model process
                cases = [("ask, first token (warm model off: loaded by the command)", {"CTXRAG_LLM__WARM_IDLE_S": "0"}),
                         ("ask, first token (first call: starts the warm model)", {"CTXRAG_LLM__WARM_IDLE_S": "600"}),
                         ("ask, first token (next calls: the warm model)", {"CTXRAG_LLM__WARM_IDLE_S": "600"})]
            for label, extra in cases:
                loads.append(_load())
                n = 1 if "first call" in label else ask_runs
                runs = [(_first_token({**env, **extra}), None) for _ in range(n)]
                loads.append(_load())
                rows.append(_row(label, variant, runs))
                print(rows[-1], "load", loads[-1], flush=True)
            subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "model", "stop"], env=env, capture_output=True)
    notes = [f"1-minute load average while measuring: {min(loads)} to {max(loads)} on {os.cpu_count()} cores "
             "(other work was running: compare the variants within this run, and read the min).",
             "Each run is a fresh process; the knowledge base is the demo corpus (6 files) without contexts.",
             "A repeated query finds its vector in the embedding cache; a new query (a fresh word per run) also runs "
             "the embedding model. `import langchain_core.retrievers` is LangChain's own floor under any retriever "
             "(it imports langsmith's tracing): a search cannot start faster than it."]
    if args.ask:
        notes.append("ask's first token: the first byte of the answer on stdout (the whole process: imports, "
                     "knowledge base, retrieval, the model, the prompt). 'next calls' are commands run after one that "
                     "left the warm model process loaded (`llm.warm_idle_s`); 'warm model off' loads the model in each "
                     "command, as every command did before.")
    if not args.ask:
        notes.append("ask's first token was not timed in this run (--ask loads the real local model).")
    write_page_data(
        "command_latency",
        title="Command latency",
        measures="wall and CPU seconds of whole ctxrag processes: import, --help, cold search (English, Chinese; repeated "
                 "and new query), ask's first token",
        data="the shipped demo corpus (6 files, contexts off) in a temporary CTXRAG_HOME",
        tables=[Table(caption="wall seconds per process (min, median, max over the runs) and its least CPU time (user + "
                              "system; what other work on the machine stretches least)",
                      columns=["command", "code", "min s", "median s", "max s", "min CPU s", "runs"], rows=rows)],
        notes=notes,
        out_dir=args.out_dir,
    )


if __name__ == "__main__":
    main()
