"""Retrieval quality: ctxrag's BM25Retriever vs LangChain's BM25Retriever on the contextual-retrieval benchmark.

248 queries of ../shared/data/contextual-retrieval/evaluation_set.jsonl over the 737 chunks as given (no contexts),
same tokenizer for both. Pass@k = per query (golden chunks in the top k) / (golden chunks), averaged; a chunk is
identified by (original_uuid, original_index).

    python bench/bench_bm25_retrieval.py
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from langchain_community.retrievers import BM25Retriever as LangChainBM25Retriever
from langchain_core.documents import Document

from ctxrag.retrievers.bm25 import BM25Retriever
from ctxrag.stores.bm25 import make_tokenizer

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "contextual-retrieval"
KS = (5, 10, 20)


def main() -> None:
    corpus = json.loads((DATA / "codebase_chunks.json").read_text(encoding="utf-8"))
    docs = [
        Document(c["content"], id=f"{d['original_uuid']}:{c['original_index']}",
                 metadata={"key": f"{d['original_uuid']}:{c['original_index']}"})
        for d in corpus for c in d["chunks"]
    ]
    queries = [json.loads(line) for line in (DATA / "evaluation_set.jsonl").read_text(encoding="utf-8").splitlines()]
    tokenizer = make_tokenizer("code")
    retrievers = {
        "ctxrag BM25Retriever": BM25Retriever.from_documents(docs, tokenizer=tokenizer, k=max(KS)),
        "langchain BM25Retriever": LangChainBM25Retriever.from_documents(docs, preprocess_func=tokenizer, k=max(KS)),
    }
    print(f"{len(docs)} chunks, {len(queries)} queries, tokenizer: code (EnglishTokenizer defaults)")
    print(f"| {'retriever':<24} | {'Pass@5':>7} | {'Pass@10':>7} | {'Pass@20':>7} | {'ms/query':>8} |")
    print(f"|{'-' * 26}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 10}|")
    for name, retriever in retrievers.items():
        totals = dict.fromkeys(KS, 0.0)
        start = time.perf_counter()
        for q in queries:
            ranked = [d.metadata["key"] for d in retriever.invoke(q["query"])]
            golden = {f"{uuid}:{index}" for uuid, index in q["golden_chunk_uuids"]}
            for k in KS:
                totals[k] += len(golden & set(ranked[:k])) / len(golden)
        ms = (time.perf_counter() - start) * 1000 / len(queries)
        p = {k: 100 * totals[k] / len(queries) for k in KS}
        print(f"| {name:<24} | {p[5]:>7.2f} | {p[10]:>7.2f} | {p[20]:>7.2f} | {ms:>8.2f} |")


if __name__ == "__main__":
    main()
