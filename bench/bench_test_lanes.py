"""Benchmark: how long the test suite takes (docs/testing.md), per lane, per test folder and per test, and how many
chat model loads and processes one run costs.

    python bench/bench_test_lanes.py                            # the whole suite, as the README runs it
    python bench/bench_test_lanes.py --lane all --lane fast     # and the fast lane as its own run
    python bench/bench_test_lanes.py --workers 0                # without pytest-xdist (-n 0), to compare
    python bench/bench_test_lanes.py --beside "yes > /dev/null" --beside "yes > /dev/null"   # two busy cores beside it

A run is ``python -m pytest [-m <lane>] --durations=0 -q`` in the repository root (the addopts of pyproject.toml
apply, pytest-xdist's ``-n`` included unless ``--workers`` overrides it); its row has the wall time, the CPU time of
pytest and every process it started (see `run_pytest`), the pytest summary, the load average before and after, the
chat model loads (the file the test fixtures write, ``$CTXRAG_TEST_MODEL_LOADS``), the processes the tests started
(conftest's count) and the model replies the reply cache replayed, decoded or passed through (its keys are kept in
``$TMPDIR/ctxrag-test-lanes/llm_replies_used_*.txt`` for ``python -m ctxrag.testing.reply_cache prune``); the load
column adds the mean 1-minute load sampled during the run. From pytest's ``--durations`` of the whole-suite run come
the seconds per lane (each test's setup, call and teardown, the lanes told apart by ``--collect-only``), per
top-level test folder and the slowest tests, each with what it checks that no cheaper test does (`WHY`).
``--before-log`` reads the same tables from the log of an earlier run (the runs keep theirs in
``$TMPDIR/ctxrag-test-lanes``). Writes
``docs/benchmarks/data/test_lanes.json`` through `bench/pagedata.py`, keeping the rows of its ``history`` table.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import DATA_DIR, ROOT, Table, commit, write_page_data  # noqa: E402

LANES = {"all": None, "fast": "not llm and not slow", "rest": "llm or slow"}
_SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed).*?) in [\d.]+s", re.M)
_DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)", re.M)
_LOADS = re.compile(r"chat model loads in this test run: (\d+)")
_STARTS = re.compile(r"processes started by the tests: (\d+)")
_REPLIES = re.compile(r"model replies \(CTXRAG_TEST_LLM_CACHE=([\w-]+)\): (\d+) replayed, (\d+) decoded and recorded, "
                      r"(\d+) passed through")
TOP_TESTS = 30
LOG_DIR = Path(tempfile.gettempdir()) / "ctxrag-test-lanes"
HISTORY = "history: the whole suite and its lanes, run by run"
REPLIES_COLUMN = "model replies: replayed / decoded / passed through (cache mode)"

WHY = {
    "tests/models/test_llamacpp_standard.py": "LangChain's standard chat-model contract on the real in-process model "
                                              "(the 0.5B): invoke, stream, batch, tools, structured output",
    "tests/models/test_llamacpp.py": "structured output and tool calls of the in-process class (the 0.5B) with answer "
                                     "checks",
    "tests/models/test_chat.py": "the real llama_cpp.server's live reply equals the in-process 1.5B's (recorded); "
                                 "logprobs, stop, streams (0.5B)",
    "tests/models/test_loop_guard_llm.py": "the loop guard stops a real looping reply (0.5B); the 1.5B demo answer",
    "tests/models/test_gguf.py": "the shipped GGUF parts assemble into the verified model files",
    "tests/docs/test_code_blocks.py": "every README and guide code block runs as written (real ctxrag processes)",
    "tests/notebooks/test_notebooks.py": "every notebook runs top to bottom in a real kernel",
    "tests/test_wheel_install.py": "the built wheel installs, imports, runs the demo and resolves without downgrades",
    "tests/kb/test_kb_concurrency.py": "several real processes writing one knowledge base lose nothing",
    "tests/kb/test_kb_delete.py": "deletes from real concurrent processes",
    "tests/kb/test_kb_damage_live.py": "damage while real processes read and write is found and healed",
    "tests/kb/test_kb_server_writes.py": "the HTTP server and CLI processes writing one knowledge base",
    "tests/stores/test_store_conformance.py": "every store under real concurrent and killed ctxrag processes",
    "tests/stores/vectors/test_backend_conformance.py": "every backend reconciles after a real kill -9",
    "tests/stores/vectors/test_single_process_backends.py": "single-process backends refuse a second real process",
    "tests/stores/vectors/test_milvus.py": "a real Milvus Lite server process",
    "tests/server/test_milvus_scale_out.py": "two real ctxrag servers on one Milvus standalone",
    "tests/server/test_playground.py": "the browser playground in real chromium",
    "tests/server/test_app.py": "the HTTP app with the real model and `ctxrag serve` as a process",
    "tests/evaluation/test_product_parity.py": "the benchmark ranks exactly as the product (reranked with the 1.5B)",
    "tests/chains/test_assistant_llm.py": "the assistant's tool loop with the real 1.5B",
    "tests/chains/test_assistant_tracing.py": "the assistant's trace over the real server",
    "tests/compressors/test_llm_rerank.py": "the LLM reranker's scores from the real model",
    "tests/cli/test_demo.py": "`ctxrag demo` answers with the local model",
    "tests/models/test_warm.py": "real `ctxrag ask` processes find the one warm model server (0.5B, served from the "
                                 "run's in-process model) and answer as the in-process model; it keeps the prompt "
                                 "prefix between calls; the model process starts once (real processes, model-free)",
    "tests/models/test_llamacpp_prefix.py": "the shared context's kept prefix and small prompt batches change no "
                                            "logit, to the bit (0.5B, and a second llama.cpp context with batch 512)",
    "tests/models/test_tool_loop_llm.py": "a LangChain agent on the real 0.5B calls the tool, then answers with its "
                                          "fact",
    "tests/test_tools.py": "a LangChain agent calls the knowledge base's search tool on the real 0.5B",
    "tests/kb/test_typing.py": "mypy --strict over the kb, chains and serving packages (one run, cached across runs)",
    "tests/kb/test_kb_milvus_resident.py": "the Milvus-resident knowledge base driven by real (killed, concurrent) "
                                           "`ctxrag` processes",
    "tests/stores/milvus_resident/test_store.py": "the Milvus-resident store on a real Milvus 2.3 standalone gets "
                                                  "dense search only",
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _adopt_orphans() -> None:
    """Make this process the reaper of the run's orphans (the shared model server outlives the xdist worker that
    started it), so their CPU time is counted too (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.5)  # an orphan still exiting


def run_pytest(expression: str | None, workers: str | None, extra: list[str] | None = None) -> dict:
    """Run pytest (``-m expression`` unless None) with ``--durations=0``; return wall and CPU seconds (pytest and
    every process it started and waited for, orphans adopted by this process included: CPU time barely moves with
    the machine's load, so it is the number to compare between busy runs), summary, exit code, output, model loads."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", *(extra or [])]
    if expression:
        cmd += ["-m", expression]
    if workers is not None:
        cmd += ["-n", workers]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^a-z0-9]+", "_", f"{expression or 'all'} n{workers}")
    log, loads = LOG_DIR / f"test_lanes_{name}.log", LOG_DIR / f"model_loads_{name}.txt"  # follow it with tail -f
    loads.unlink(missing_ok=True)
    used = LOG_DIR / f"llm_replies_used_{name}.txt"  # for python -m ctxrag.testing.reply_cache prune --used
    env = {**os.environ, "CTXRAG_TEST_MODEL_LOADS": str(loads), "PYTHONPATH": str(ROOT / "src"),
           "CTXRAG_TEST_LLM_USED": str(used)}
    samples, done = [], threading.Event()

    def sample_load() -> None:  # the machine is shared: the mean 1-minute load while the run lasts
        while not done.wait(30.0):
            samples.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample_load, daemon=True)
    before, cpu, start = os.getloadavg()[0], _children_cpu(), time.monotonic()
    sampler.start()
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True).returncode
    _reap()
    seconds, cpu = time.monotonic() - start, _children_cpu() - cpu
    done.set()
    stdout = log.read_text(encoding="utf-8", errors="replace")
    found = _SUMMARY.findall(stdout)
    starts = _STARTS.findall(stdout)
    replies = _REPLIES.findall(stdout)
    mean = f", mean {sum(samples) / len(samples):.1f}" if samples else ""
    return {"seconds": seconds, "cpu": cpu, "summary": found[-1][0] if found else "no pytest summary", "code": code,
            "out": stdout, "load": f"{before:.1f} / {os.getloadavg()[0]:.1f}{mean}",
            "loads": loads.read_text(encoding="utf-8").splitlines() if loads.is_file() else [],
            "starts": int(starts[-1]) if starts else None, "log": str(log),
            "replies": "{1} / {2} / {3} ({0})".format(*replies[-1]) if replies else ""}


def _test_id(node: str) -> str:
    return node.split("@")[0]  # pytest-xdist's loadgroup appends "@group"


def _folder(test_id: str) -> str:
    parts = test_id.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 else "tests/*.py"


def per_test(out: str) -> dict[str, float]:
    """Seconds per test (setup + call + teardown) from pytest's ``--durations=0`` output."""
    tests: dict[str, float] = {}
    for s, _, node in _DURATION.findall(out):
        tests[_test_id(node)] = tests.get(_test_id(node), 0.0) + float(s)
    return tests


def fast_lane_ids() -> set[str]:
    """Test ids of the fast lane, as pytest collects them (no test runs)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0",
                           "-m", LANES["fast"]], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    return {_test_id(line.strip()) for line in done.stdout.splitlines() if "::" in line}


def detail_tables(tests: dict[str, float], where: str, label: str) -> list[Table]:
    """Seconds per top-level folder and the slowest tests of one run."""
    folders: dict[str, float] = {}
    for test, s in tests.items():
        folders[_folder(test)] = folders.get(_folder(test), 0.0) + s
    slowest = sorted(tests.items(), key=lambda x: -x[1])[:TOP_TESTS]
    return [
        Table(caption=f"{label}: seconds per test folder (its tests' setup, call and teardown){where}",
              columns=["folder", "seconds", "tests"],
              rows=[[f, round(t, 1), sum(_folder(x) == f for x in tests)]
                    for f, t in sorted(folders.items(), key=lambda x: -x[1])]),
        Table(caption=f"{label}: the {TOP_TESTS} slowest tests (setup, call and teardown){where}",
              columns=["seconds", "test", "what it checks that no cheaper test does"],
              rows=[[round(s, 1), t, WHY.get(t.split("::")[0], "")] for t, s in slowest]),
    ]


def _history(label: str) -> list[list]:
    path = DATA_DIR / "test_lanes.json"
    if not path.is_file():
        return []
    old = json.loads(path.read_text(encoding="utf-8"))
    return [row for t in old["tables"] if t["caption"] == HISTORY for row in t["rows"] if row[0] != label]


def _current_tables() -> list[dict[str, Any]]:
    """The page's current run table, its loads table, then its other tables (all but the history), as stored."""
    old = json.loads((DATA_DIR / "test_lanes.json").read_text(encoding="utf-8"))["tables"]
    rest = [t for t in old if t["caption"] != HISTORY]
    loads = [t for t in rest if t["caption"].startswith("the chat model loads")]
    return [rest[0], *loads, *[t for t in rest[1:] if t not in loads]]


def _current_notes() -> list[str]:
    return list(json.loads((DATA_DIR / "test_lanes.json").read_text(encoding="utf-8")).get("notes") or [])


def _number(cell: str) -> object:
    try:
        return float(cell) if "." in cell else int(cell)
    except ValueError:
        return cell


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lane", action="append", choices=list(LANES), help="repeatable; default: all")
    ap.add_argument("--workers", default=None, help="pytest-xdist's -n for every run (0: one process); default: addopts")
    ap.add_argument("--beside", action="append", default=[], help="a shell command run beside the runs (repeatable)")
    ap.add_argument("--label", default=None, help="the row name of this run in the history table")
    ap.add_argument("--before-log", default=None, help="LABEL=PATH: the folder and slowest-test tables of an earlier "
                                                       "run's log (pytest with --durations)")
    ap.add_argument("--record", action="append", default=[],
                    help="a history row transcribed from an earlier run's record, its cells separated by '|' "
                         "(run|lane|workers|minutes|CPU minutes|summary|exit code|load|model loads|processes"
                         "|model replies)")
    ap.add_argument("--records-only", action="store_true",
                    help="run nothing: keep the page's current run and tables, add the --record rows (and "
                         "--before-log) to its history")
    ap.add_argument("--note", action="append", default=[], help="a note for the page (repeatable)")
    ap.add_argument("--no-page", action="store_true", help="print only; do not write the page data")
    args = ap.parse_args()
    lanes = [] if args.records_only else args.lane or ["all"]
    _adopt_orphans()
    besides = [subprocess.Popen(c, shell=True, start_new_session=True) for c in args.beside]
    where = "".join(f", beside `{c}`" for c in args.beside)
    label = args.label or f"{commit()}{where}"
    workers = f"-n {args.workers}" if args.workers is not None else "addopts"
    rows, tables, history, loads_rows = [], [], _history(label), []
    for record in args.record:
        cells = [c.strip() for c in record.split("|")]
        history = [h for h in history if h[:2] != cells[:2]] + [[_number(c) for c in cells]]
    try:
        for lane in lanes:
            run = run_pytest(LANES[lane], args.workers)
            row = [lane, f'-m "{LANES[lane]}"' if LANES[lane] else "(none)", workers, round(run["seconds"] / 60, 1),
                   round(run["cpu"] / 60, 1), run["summary"], run["code"], run["load"], len(run["loads"]),
                   run["starts"], run["replies"]]
            rows.append(row)
            history.append([label, lane, workers, *row[3:]])
            print(row, f"(log: {run['log']})", flush=True)
            loads_rows += [[lane, line] for line in run["loads"]]
            tests = per_test(run["out"])
            if lane != "all":
                tables += detail_tables(tests, where, f"the {lane} lane")
                continue
            fast = fast_lane_ids()
            tables.append(Table(caption=f"the whole suite's run by lane: the sum of its tests' seconds{where}",
                                columns=["lane", "tests", "seconds", "minutes"],
                                rows=[[name, len(ids), round(sum(ids.values()), 1), round(sum(ids.values()) / 60, 1)]
                                      for name, ids in (("fast", {t: s for t, s in tests.items() if t in fast}),
                                                        ("rest", {t: s for t, s in tests.items() if t not in fast}))]))
            tables += detail_tables(tests, where, "the whole suite")
    finally:
        for proc in besides:
            os.killpg(proc.pid, 9)
    if args.before_log:
        before_label, _, path = args.before_log.partition("=")
        tables += detail_tables(per_test(Path(path).read_text(encoding="utf-8", errors="replace")), "", before_label)
    run_table = Table(caption="each run: one pytest command" + where,
                      columns=["lane", "markers", "workers", "minutes", "CPU minutes", "pytest summary", "exit code",
                               "load before / after", "chat model loads", "processes started by the tests",
                               REPLIES_COLUMN],
                      rows=rows)
    history_table = Table(caption=HISTORY, columns=["run", "lane", "workers", "minutes", "CPU minutes",
                                                    "pytest summary", "exit code", "load before / after",
                                                    "chat model loads", "processes started by the tests",
                                                    REPLIES_COLUMN],
                          rows=[row + [""] * (11 - len(row)) for row in history])
    loads_table = Table(caption="the chat model loads of each run (conftest's list)", columns=["lane", "load"],
                        rows=loads_rows)
    if args.records_only:  # keep the page's current run and its tables; only the history gains the --record rows
        current = _current_tables()
        run_table = Table(caption=current[0]["caption"], columns=current[0]["columns"], rows=current[0]["rows"])
        loads_table = Table(caption=current[1]["caption"], columns=current[1]["columns"], rows=current[1]["rows"])
        tables = [Table(caption=t["caption"], columns=t["columns"], rows=t["rows"]) for t in current[2:]] + tables
        notes = [*_current_notes(), *args.note]
    else:
        notes = args.note
    if not args.no_page:
        write_page_data(
            "test_lanes",
            title="Test lanes",
            measures="wall and CPU time of the whole test suite and its lanes, per test folder and per test; chat "
                     "model loads and processes started per run",
            data="the repository's own test suite",
            tables=[run_table, history_table, loads_table, *tables],
            notes=notes,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
