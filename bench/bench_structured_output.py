"""Structured output against free-text parsing, for the four places the project reads a model's reply: the LLM router's
route label, triplet extraction, the reranker's yes/no verdict and the answer judge's 1-5 score.

Each task runs twice on the same small sample with the same model (the embedded Qwen2.5-Coder-1.5B by default):
"before" parses the reply's free text (``structured=False``, the old path), "after" asks for the task's Pydantic
schema through ``with_structured_output`` (a llama.cpp grammar constrains the reply). Per task and path:

- parse failures: replies the component could not read (router: fell back to the fast router; triplets: no JSON;
  rerank: no yes/no; judge: no 1-5 score);
- accuracy: router, the labelled route (``ctxrag/resources/routing/routing_set.jsonl``, a few items per scenario);
  triplets, the share of the reference triplets' entities recovered (MuSiQue passages, HippoRAG's gpt-3.5-turbo
  OpenIE as reference, as in ``bench/bench_triplets.py``); rerank, the verdict matches the label (a query of the
  contextual-retrieval set with its golden chunk = yes, with a chunk of another document = no); judge, a reference
  alias judged >= 4 and another question's answer judged <= 2 (MuSiQue);
- seconds per model call (the machine is shared: see the load average on the page).

    python bench/bench_structured_output.py [--router 10 --triplets 4 --rerank 4 --judge 4]

On a loaded machine run tasks in pieces (``--router 0`` skips a task) with ``--json`` each, then write the page from
all of them: ``python bench/bench_structured_output.py --merge a.json b.json``.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pagedata import SHARED_DATA, Table, write_page_data  # noqa: E402

DATA = SHARED_DATA


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


# ------------------------------------------------------------------------------------------------ tasks


def bench_router(llm: Any, n: int, structured: bool) -> dict[str, Any]:
    from ctxrag.chains.router import LLMRouter
    from ctxrag.evaluation.routing import build_routing_kbs, evaluate_router, load_routing_set

    items = [i for i in load_routing_set() if not i.get("history")]
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_scenario.setdefault(item["scenario"], []).append(item)
    per = max(1, n // len(by_scenario))
    sample = [i for group in by_scenario.values() for i in random.Random(0).sample(group, min(per, len(group)))]
    kbs = build_routing_kbs(ROOT / "examples" / "sample_corpus")

    def factory(kind: str, kb: Any, model: Any, *, catalog: Any) -> LLMRouter:
        return LLMRouter(kb, model, catalog=catalog, structured=structured)

    report = evaluate_router("llm", sample, kbs, llm, router_factory=factory)
    return {"n": report["n"], "failures": report["fallbacks"], "accuracy": report["accuracy"],
            "s_per_call": sum(r["seconds"] for r in report["rows"]) / max(1, report["n"])}


def bench_triplets(llm: Any, n: int, structured: bool) -> dict[str, Any]:
    from bench_triplets import OPENIE, gold_triplets, score

    from ctxrag.graph.triplets import TripletExtractor

    docs = json.loads((DATA / "multihop" / OPENIE.name).read_text(encoding="utf-8"))["docs"][:n]
    extractor = TripletExtractor(llm, max_retries=0, structured=structured)
    recalls, seconds = [], 0.0
    for doc in docs:
        passage = doc.get("passage") or f"{doc.get('title', '')}\n{doc.get('text', '')}"
        got, s = _timed(lambda p=passage: extractor.extract(p))
        seconds += s
        r = score(passage, got, gold_triplets(doc))["entity_recall"]
        recalls.append(r if r is not None else 0.0)
    return {"n": len(docs), "failures": extractor.failures, "accuracy": sum(recalls) / max(1, len(recalls)),
            "s_per_call": seconds / max(1, len(docs))}


def _rerank_pairs(n: int) -> list[tuple[str, str, bool]]:
    base = DATA / "contextual-retrieval"
    chunks: dict[tuple[str, int], str] = {}
    for doc in json.loads((base / "codebase_chunks.json").read_text(encoding="utf-8")):
        for c in doc["chunks"]:
            chunks[(doc["original_uuid"], c["original_index"])] = c["content"]
    rng = random.Random(0)
    keys = sorted(chunks)
    pairs = []
    for line in (base / "evaluation_set.jsonl").read_text(encoding="utf-8").splitlines()[:n]:
        q = json.loads(line)
        gold = tuple(q["golden_chunk_uuids"][0])
        other = rng.choice([k for k in keys if k[0] not in q["golden_doc_uuids"]])
        pairs += [(q["query"], chunks[gold], True), (q["query"], chunks[other], False)]
    return pairs


def bench_rerank(llm: Any, n: int, structured: bool) -> dict[str, Any]:
    from langchain_core.documents import Document

    from ctxrag.compressors.llm_rerank import RERANK_SCORE, LLMReranker

    reranker = LLMReranker(llm=llm, scoring="verdict", top_n=None, max_concurrency=1, structured=structured,
                           max_chars=1200)
    failures = correct = 0
    pairs = _rerank_pairs(n)
    seconds = 0.0
    for query, text, relevant in pairs:
        out, s = _timed(lambda: reranker.compress_documents([Document(text)], query))
        seconds += s
        verdict = out[0].metadata[RERANK_SCORE]
        failures += verdict is None
        correct += verdict is not None and bool(verdict) == relevant
    return {"n": len(pairs), "failures": failures, "accuracy": correct / len(pairs), "s_per_call": seconds / len(pairs)}


def bench_judge(llm: Any, n: int, structured: bool) -> dict[str, Any]:
    from ctxrag.evaluation.judge import AnswerJudge

    items = json.loads((DATA / "multihop" / "musique_train.json").read_text(encoding="utf-8"))[: n + 1]
    judge = AnswerJudge(llm, structured=structured)
    failures = correct = calls = 0
    seconds = 0.0
    for i, item in enumerate(items[:n]):
        aliases = ast.literal_eval(item["answer_aliases"]) if isinstance(item["answer_aliases"], str) else []
        right = f"The answer is {aliases[0] if aliases else item['answer']}."
        wrong = f"The answer is {items[i + 1]['answer']}."
        for candidate, is_right in ((right, True), (wrong, False)):
            verdict, s = _timed(lambda c=candidate: judge.correctness(item["question"], c, item["answer"]))
            seconds += s
            calls += 1
            failures += verdict.score is None
            if verdict.score is not None:
                correct += verdict.score >= 4 if is_right else verdict.score <= 2
    return {"n": calls, "failures": failures, "accuracy": correct / max(1, calls), "s_per_call": seconds / max(1, calls)}


TASKS: dict[str, Callable[[Any, int, bool], dict[str, Any]]] = {
    "router": bench_router, "triplets": bench_triplets, "rerank": bench_rerank, "judge": bench_judge,
}
ACCURACY = {
    "router": "route right",
    "triplets": "reference entities recovered",
    "rerank": "yes/no verdict right",
    "judge": "right side of the scale",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for task, default in (("router", 10), ("triplets", 4), ("rerank", 4), ("judge", 4)):
        ap.add_argument(f"--{task}", type=int, default=default, help=f"sample size of the {task} task (0 skips it)")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--no-page", action="store_true", help="do not write docs/benchmarks/data/structured_output.json")
    ap.add_argument("--merge", type=Path, nargs="+", help="write the page from these --json results (runs nothing)")
    ap.add_argument("--command", help="with --merge: the command lines that measured the merged results")
    args = ap.parse_args(argv)
    if args.merge:
        merged: dict[str, dict[str, Any]] = {}
        for path in args.merge:
            for task, paths in json.loads(path.read_text(encoding="utf-8")).items():
                merged.setdefault(task, {}).update(paths)
        write_page(merged, args.command or "python bench/bench_structured_output.py --merge " + " ".join(
            map(str, args.merge)), model_name=None)
        return 0

    os.environ.setdefault("CTXRAG_HOME", tempfile.mkdtemp(prefix="ctxrag-bench-so-"))
    os.environ.setdefault("CTXRAG_CONTEXTUALIZE", "false")
    from ctxrag.models.chat import make_chat_model

    llm = make_chat_model(temperature=0.0, max_tokens=256)
    getattr(llm, "load", lambda: None)()
    results: dict[str, dict[str, Any]] = {}
    for task, fn in TASKS.items():
        n = getattr(args, task)
        if n <= 0:
            continue
        results[task] = {}
        for label, structured in (("before", False), ("after", True)):
            results[task][label] = fn(llm, n, structured)
            print(task, label, results[task][label], flush=True)
            if args.json:  # after every piece: a long run cut short keeps what it measured
                args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    if not args.no_page:
        write_page(results, "python bench/bench_structured_output.py " + " ".join(
            argv if argv is not None else sys.argv[1:]), model_name=getattr(llm, "model_name", None))
    return 0


def write_page(results: dict[str, dict[str, Any]], command: str, model_name: str | None) -> None:
    """The benchmark page's data: one row per task with both paths measured."""
    rows = []
    for task in TASKS:
        r = results.get(task, {})
        if "before" not in r or "after" not in r:
            continue
        b, a = r["before"], r["after"]
        rows.append([task, ACCURACY[task], b["n"], b["failures"], a["failures"], round(b["accuracy"], 3),
                     round(a["accuracy"], 3), round(b["s_per_call"], 2), round(a["s_per_call"], 2)])
    path = write_page_data(
        "structured_output",
        title="Structured output against free-text parsing",
        measures="parse failures, accuracy and seconds per call of the router, triplet extraction, rerank "
                 "yes/no and the answer judge, reading free text (before) and through with_structured_output "
                 "with llama.cpp grammar-constrained decoding (after)",
        data="routing set items without history (a few per scenario); MuSiQue passages with HippoRAG's "
             "gpt-3.5-turbo OpenIE triplets; contextual-retrieval queries with their golden chunk and a chunk of "
             "another document; MuSiQue questions with an alias of the answer and another question's answer",
        command=command,
        tables=[Table(
            caption=f"{model_name or 'qwen2.5-coder-1.5b-instruct-q4_k_m'} in-process, temperature 0 "
                    "(n = calls per path)",
            columns=["task", "accuracy is", "n", "parse failures before", "parse failures after",
                     "accuracy before", "accuracy after", "s/call before", "s/call after"],
            rows=rows,
            notes=["Seconds were measured on a shared, heavily loaded 2-core machine (load average on this page): "
                   "compare the two columns of one row, not across pages."],
        )],
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
