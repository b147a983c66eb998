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
import json
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
DEMO_QUESTIONS = ROOT / "src" / "ctxrag" / "resources" / "demo" / "sample_questions.json"
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


def _staged_ask(env: dict[str, str], question: str) -> tuple[float, dict[str, object]]:
    """`_first_token` through ``bench/ask_stages.py`` (the same command with a clock on each stage): the seconds to
    the first byte of the answer and the stages it printed."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "ask_stages.py"), "ask", question, "--kb", "bench"],
                            env=env, cwd=tempfile.gettempdir(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    first = proc.stdout.read(1)
    elapsed = time.monotonic() - t0
    rest, err = proc.communicate()
    lines = [ln for ln in (first + rest).decode("utf-8", "replace").splitlines() if ln.startswith("STAGES ")]
    if not first or proc.returncode != 0 or not lines:
        raise SystemExit(f"ctxrag ask failed ({proc.returncode}):\n{err.decode('utf-8', 'replace')[-2000:]}")
    stages = json.loads(lines[-1][len("STAGES "):])
    stages["process start"] = stages.pop("t0") - t0
    return elapsed, stages


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else float("nan")


def _stage_rows(cases: dict[str, list[dict[str, object]]]) -> tuple[list[str], list[list[object]]]:
    """One row per stage, one column per case: the median over the case's runs (seconds unless the row says)."""
    def calls(run: dict[str, object]) -> tuple[dict, dict]:
        """The quote call and the answer's call ({} for one that did not happen: an abstention)."""
        made = list(run["calls"])  # type: ignore[call-overload]
        quote = made.pop(0) if "quote call" in run and made else {}
        return quote, made[0] if made else {}

    def timing(call: dict, key: str) -> float:
        return float((call.get("timings") or {}).get(key, 0.0))

    stages: list[tuple[str, object]] = [
        ("process start (interpreter, until the first import)", lambda r: r["process start"]),
        ("imports (ctxrag CLI, LangChain)", lambda r: r["imports"]),
        ("knowledge base open", lambda r: r.get("kb open", 0.0)),
        ("chat model set-up (the warm process found or started)", lambda r: r.get("model set-up", 0.0)),
        ("retrieval, hybrid k=4 (query embedding included)", lambda r: r.get("retrieval", 0.0)),
        ("relevance gate", lambda r: r.get("relevance gate", 0.0)),
        ("key terms (BM25 frequencies read, then the check)",
         lambda r: r.get("key terms set-up", 0.0) + r.get("key terms", 0.0)),
        ("quote call: prompt tokens", lambda r: calls(r)[0].get("prompt_tokens") or 0),
        ("quote call: prompt tokens evaluated (the rest were in llama.cpp's context)",
         lambda r: timing(calls(r)[0], "prompt_eval_tokens")),
        ("quote call: prompt evaluation", lambda r: timing(calls(r)[0], "prompt_eval_s")),
        ("quote call: tokens decoded", lambda r: timing(calls(r)[0], "decode_tokens")),
        ("quote call: decode", lambda r: timing(calls(r)[0], "decode_s")),
        ("quote call, whole (as the command waits for it)", lambda r: r.get("quote call", 0.0)),
        ("answer: prompt tokens evaluated", lambda r: timing(calls(r)[1], "prompt_eval_tokens")),
        ("answer: prompt evaluation", lambda r: timing(calls(r)[1], "prompt_eval_s")),
        ("answer: first token, from process start", lambda r: calls(r)[1].get("first token", 0.0)),
        ("answer: end, from process start", lambda r: calls(r)[1].get("end", 0.0)),
        ("command: end, from process start", lambda r: r["end"]),
    ]
    rows = [[name, *[_median([float(get(r)) for r in runs]) for runs in cases.values()]]  # type: ignore[operator]
            for name, get in stages]
    return ["stage (median over the runs; seconds unless named)", *cases], rows


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
    parser.add_argument("--focus-chars", type=int, default=0,
                        help="answer_focus_chars of the comparison ask row (0: whole chunks), beside the default's "
                             "rows (the option's effect on the first token)")
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args()

    before = _source(args.before, Path(tempfile.mkdtemp(prefix="ctxrag-before-"))) if args.before else None
    variants = [("this commit", ROOT / "src")] + ([(f"before ({args.before})", before)] if before else [])
    model = None
    if args.ask:
        sys.path.insert(0, str(ROOT / "src"))
        from ctxrag.models.gguf import local_model_path

        model = local_model_path(progress=False)
        from ctxrag.settings import Settings

        default_focus = Settings.model_fields["answer_focus_chars"].default
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
    stage_cases: dict[str, list[dict[str, object]]] = {}
    if args.ask:
        ask_runs = max(1, min(args.runs, args.ask_runs))
        questions = [q["question"] for q in json.loads(DEMO_QUESTIONS.read_text(encoding="utf-8"))]
        for variant, src in variants:
            env = _env(src, homes[src], model)
            if src != ROOT / "src":  # an older version: the command as it was, the model loaded by the command
                loads.append(_load())
                runs = [(_first_token(env), None) for _ in range(ask_runs)]
                loads.append(_load())
                rows.append(_row("ask, first token", variant, runs))
                continue
            warm = {"CTXRAG_LLM__WARM_IDLE_S": "600"}
            focus = {**warm, "CTXRAG_ANSWER_FOCUS_CHARS": str(args.focus_chars)}
            # this commit: the model loaded by the command itself; then the warm model process, started by the
            # first call; then next calls, each a question other than the one before (its chunks are new to
            # llama.cpp's context; only the instructions before them are reused), with the settings as shipped
            # (answer_focus_chars=default_focus) and with --focus-chars
            cases = [("ask, first token (warm model off: loaded by the command)", {"CTXRAG_LLM__WARM_IDLE_S": "0"}, 1),
                     ("ask, first token (first call: starts the warm model)", warm, 1),
                     ("ask, first token (next calls: the warm model, another question each)", warm, ask_runs),
                     (f"ask, first token (next calls, answer_focus_chars={args.focus_chars})", focus, ask_runs)]
            for i, (label, extra, n) in enumerate(cases):
                runs, staged = [], []
                for j in range(n):
                    # both 'next calls' cases ask the same questions, none the one asked just before
                    asked = i if i < 2 else 2 + j
                    loads.append(_load())
                    wall, stages = _staged_ask({**env, **extra}, questions[asked % len(questions)])
                    loads.append(_load())
                    runs.append((wall, None))
                    staged.append(stages)
                    print(label, round(wall, 2), "load", loads[-2], json.dumps(stages, ensure_ascii=False), flush=True)
                rows.append(_row(label, variant, runs))
                if "next calls" in label:
                    chars = args.focus_chars if "answer_focus_chars" in label else default_focus
                    stage_cases[f"focus {chars} chars" if chars else "whole chunks"] = staged
            subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "model", "stop"], env=env, capture_output=True)
    notes = [f"1-minute load average while measuring: {min(loads)} to {max(loads)} on {os.cpu_count()} cores "
             "(other work was running: compare the variants within this run, and read the min).",
             "Each run is a fresh process; the knowledge base is the demo corpus (6 files) without contexts.",
             "A repeated query finds its vector in the embedding cache; a new query (a fresh word per run) also runs "
             "the embedding model. `import langchain_core.retrievers` is LangChain's own floor under any retriever "
             "(it imports langsmith's tracing): a search cannot start faster than it."]
    if args.ask:
        notes.append("ask's first token: the first byte of the answer on stdout (the whole process: imports, "
                     "knowledge base, retrieval, the evidence check's quote call, the answer's prompt). 'next calls' "
                     "are commands run after one that left the warm model process loaded (`llm.warm_idle_s`), each "
                     "asking the demo's next question, so its chunks are new to llama.cpp's context (a repeated "
                     "question would find them there); 'warm model off' loads the model in the command, as every "
                     "command did before the warm process. Each ask runs through bench/ask_stages.py: the same "
                     "command in the same kind of process, with a clock on each stage (the stage table).")
        notes.append(f"Rows without answer_focus_chars run the settings as shipped: answer_focus_chars={default_focus} "
                     "(chunks longer than that are given to the model as their sentences holding the question's "
                     "terms, `ctxrag.chains.focus.SentenceFocus`; chosen on the answers and citations pages); the "
                     f"answer_focus_chars={args.focus_chars} row is the comparison (0: whole chunks).")
    if not args.ask:
        notes.append("ask's first token was not timed in this run (--ask loads the real local model).")
    tables = [Table(caption="wall seconds per process (min, median, max over the runs) and its least CPU time (user + "
                            "system; what other work on the machine stretches least)",
                    columns=["command", "code", "min s", "median s", "max s", "min CPU s", "runs"], rows=rows)]
    if stage_cases:
        columns, stage_rows = _stage_rows(stage_cases)
        tables.append(Table(caption="where a warm `ctxrag ask` spends its time (the 'next calls' rows above), stage by "
                                    "stage, from bench/ask_stages.py",
                            columns=columns, rows=stage_rows))
    write_page_data(
        "command_latency",
        title="Command latency",
        measures="wall and CPU seconds of whole ctxrag processes: import, --help, cold search (English, Chinese; repeated "
                 "and new query), ask's first token",
        data="the shipped demo corpus (6 files, contexts off) in a temporary CTXRAG_HOME",
        tables=tables,
        notes=notes,
        out_dir=args.out_dir,
    )


if __name__ == "__main__":
    main()
