"""The contextual-retrieval benchmark page: ``ctxrag eval retrieval``'s JSON (from ``bench/run_eval.sh``) with the
published and stock-LangChain reference rows, written by `pagedata.write_page_data` as ``contextual_retrieval``.

    python bench/page_contextual_retrieval.py bench/out/eval_anthropic.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import Table, write_page_data  # noqa: E402

from ctxrag.evaluation.report import ANTHROPIC_REFERENCES  # noqa: E402


def main(path: Path) -> Path:
    run = json.loads(path.read_text(encoding="utf-8"))
    ks = list(run["k"])
    xk = 10 if 10 in ks else max(ks)
    columns = ["configuration", "queries"] + [f"P@{k}" for k in ks] + [f"MRR@{xk}", f"nDCG@{xk}", "ms p50",
                                                                        "ms p95", "index s"]
    ours, failed = [], []
    for r in run["results"]:
        if r.get("error"):
            failed.append(f"{r['config']['name']}: {r['error']}")
            continue
        m = r["metrics"]
        ours.append([r["config"]["name"], r["queries"]] + [round(100 * m[f"pass@{k}"], 2) for k in ks]
                    + [round(100 * m[f"mrr@{xk}"], 2), round(100 * m[f"ndcg@{xk}"], 2),
                       round(r["query_ms_p50"], 1), round(r["query_ms_p95"], 1), round(r["index_seconds"], 1)])
    refs = [[ref.label] + [ref.pass_at.get(k, "") for k in ks] + ["" if ref.ms is None else ref.ms]
            for ref in ANTHROPIC_REFERENCES if set(ref.pass_at) & set(ks)]
    queries = ours[0][1] if ours else 0
    return write_page_data(
        "contextual_retrieval",
        title="Contextual retrieval (Anthropic's codebase benchmark)",
        measures="Pass@k (= Recall@k), MRR and nDCG (%) of each retrieval configuration; ms per query; index build s",
        data=f"{run['dataset']}: {queries} queries over the whole chunk corpus; contextual rows index the data "
             "folder's DeepSeek contexts",
        command="bench/run_eval.sh",
        tables=[
            Table(caption=f"ctxrag: each configuration is the retriever kb.as_retriever(mode, k={max(ks)}) builds "
                          "(make_retriever over the corpus in memory)", columns=columns, rows=ours),
            Table(caption="references: published numbers and the stock LangChain floor measured by the data "
                          "provider (not re-run here)",
                  columns=["reference"] + [f"P@{k}" for k in ks] + ["ms/query (mean)"], rows=refs),
        ],
        notes=["Latencies were taken on a shared machine; see the load average.", *failed],
    )


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/out/eval_anthropic.json")))
