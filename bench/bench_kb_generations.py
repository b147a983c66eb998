"""What the multi-process safety of a knowledge base costs (docs/reliability.md), measured on one machine:

* the per-query freshness check (`KnowledgeBase.refresh` when nothing changed: one ``PRAGMA data_version``), next to
  a BM25 search it precedes;
* one small write (`add_texts` of one note-sized text: lock, load the current generation with checksum verification,
  apply, write the next generation, commit), next to the save of the same indexes alone (the part the old code had too);
* a reader switching to a new generation (`refresh` after another object committed).

Embeddings are the deterministic `fake` provider so the numbers are about storage, not the model.

    PYTHONPATH=src python bench/bench_kb_generations.py --sizes 1000 10000
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ctxrag.kb import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, Settings


def _timeit(fn, repeat: int) -> float:  # noqa: ANN001
    """Median seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run(n: int, home: Path) -> dict[str, float]:
    settings = Settings(home=home, embeddings=EmbeddingSettings(provider="fake", dimensions=384))
    kb = KnowledgeBase.open("bench", settings)
    items = [{"text": f"Document {i} talks about topic{i % 97} and item{i}. " * 8, "source": f"mem://{i}"}
             for i in range(n)]
    kb.add_texts(items)
    kb.search("topic5 item7", k=5, mode="bm25")
    out: dict[str, float] = {}
    out["refresh check (no change), us"] = _timeit(kb.refresh, 2000) * 1e6
    out["bm25 search k=5, ms"] = _timeit(lambda: kb.search("topic5 item7", k=5, mode="bm25"), 50) * 1e3
    counter = iter(range(10**9))
    out["add one note (lock+load+save+commit), ms"] = _timeit(
        lambda: kb.add_texts([{"text": f"note {next(counter)} about a harbor", "source": f"note://{next(counter)}"}]),
        10) * 1e3
    with tempfile.TemporaryDirectory() as d:
        out["save of the same indexes alone, ms"] = _timeit(
            lambda: [idx.save(Path(d) / name) for name, idx in kb.indexes.items()], 10) * 1e3
    reader = KnowledgeBase.open("bench", settings)
    reader.search("topic5", k=1, mode="bm25")

    def switch() -> None:
        kb.add_texts([{"text": f"switch {time.time()}", "source": f"mem://s{time.time()}"}])
        t = time.perf_counter()
        assert reader.refresh()
        switch.t = time.perf_counter() - t  # type: ignore[attr-defined]

    times = []
    for _ in range(5):
        switch()
        times.append(switch.t)  # type: ignore[attr-defined]
    out["reader switch to a new generation, ms"] = statistics.median(times) * 1e3
    reader.close()
    kb.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="chunks in the knowledge base")
    args = ap.parse_args()
    rows = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as d:
            rows[n] = run(n, Path(d))
    keys = list(next(iter(rows.values())))
    print("| measure | " + " | ".join(f"{n} chunks" for n in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{rows[n][k]:.1f}" for n in rows) + " |")


if __name__ == "__main__":
    main()
