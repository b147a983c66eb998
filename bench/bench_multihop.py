"""Benchmark: multi-hop answers by iterative retrieval (`ctxrag.chains.multihop.MultiHopAnswer`) beside today's
single-shot answer, on MuSiQue, with the local 1.5B: EM / F1, hops used, seconds per answer.

    python bench/bench_multihop.py --questions 30               # first 30 of the seeded sample, both arms
    python bench/bench_multihop.py --questions 100              # every question (hours on 2 cores)
    python bench/bench_multihop.py --arms multihop-graph        # the loop over Graph RAG retrieval
    python bench/bench_multihop.py --report-only                # the page from the records so far

Arms, the same model (the default GGUF in process, temperature 0), the same questions, one question at a time
(every arm answers question i before question i+1, so an interrupted run leaves the arms on the same questions):

- ``single``: today's single-shot answer, as ``ctxrag eval answers --format musique --answer-style short -k 4``
  builds it (`build_ask_chain` over the hybrid top 4, `ExtractiveAnswer`, the gate off, the evidence check on);
- ``multihop``: `MultiHopAnswer` (`build_ask_chain` with ``multi_hop``, as ``ctxrag ask --multi-hop``) over the
  same hybrid retriever (at most ``--max-hops`` hops, ``--per-hop``
  new passages read per hop);
- ``multihop-graph``: the same loop over the graph retriever (``--mode graph``: HippoRAG-style PageRank over the
  set's gpt-3.5 OpenIE triplets).

Questions: the MuSiQue sample of ``../shared/data/multihop`` (100 questions, 1,890 passages) in the order of
``--sample 100 --seed 0`` (the order `ctxrag eval answers` uses), the first ``--questions``. Scores: SQuAD v1.1 EM
and F1 against the answer and its aliases (`ctxrag.evaluation.answer_metrics`). Records are appended to a JSONL
file (``--records``) as each answer is scored; a rerun skips what it holds, so an interrupted run continues.
Writes ``docs/benchmarks/data/multihop_answers.json`` through `bench/pagedata.py`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pagedata import ROOT, SHARED_DATA, Table, write_page_data  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))

DATA = SHARED_DATA / "multihop"
OUT = ROOT / "bench" / "out" / "multihop"
ARMS = {"single": "single shot (hybrid top 4, short answer)",
        "multihop": "iterative retrieval (hybrid)",
        "multihop-graph": "iterative retrieval (graph, PageRank)"}


def load_questions(n: int, seed: int) -> tuple[Any, list[Any]]:
    """The MuSiQue dataset and its first ``n`` questions in the seeded sample's order."""
    from ctxrag.evaluation.datasets import load_dataset

    dataset = load_dataset("musique", [DATA]).sample(100, seed)
    return dataset, dataset.queries[:n]


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def build_arms(arms: list[str], dataset: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Each arm's chain over the product's retrievers for the set (`EvalRunner.build_retriever`)."""
    from ctxrag.chains.ask import build_ask_chain
    from ctxrag.chains.evidence import EvidenceCheck
    from ctxrag.enums import SearchMode
    from ctxrag.evaluation.answers import answer_step
    from ctxrag.evaluation.experiments import ExperimentConfig
    from ctxrag.evaluation.runner import EvalRunner, TopK
    from ctxrag.models.chat import make_chat_model
    from ctxrag.settings import Settings

    settings = Settings(home=args.home, contextualize=False)
    llm = make_chat_model(settings, max_tokens=48, temperature=0.0)
    runner = EvalRunner(dataset, [args.k], settings=settings, progress=sys.stderr.isatty())

    def config(mode: SearchMode) -> Any:
        return ExperimentConfig(name=mode.value, retrieval=mode)

    def retriever(mode: SearchMode, k: int) -> Any:
        return runner.build_retriever(config(mode), k)[0]

    chains: dict[str, Any] = {}
    for arm in arms:
        if arm == "single":
            chains[arm] = build_ask_chain([runner.source(config(SearchMode.HYBRID))], llm, gate=False,
                                          evidence=EvidenceCheck(llm), answer=answer_step(llm, "short"),
                                          retriever=TopK(base=retriever(SearchMode.HYBRID, args.k), k=args.k))
        elif arm in ("multihop", "multihop-graph"):
            mode = SearchMode.GRAPH if arm == "multihop-graph" else SearchMode.HYBRID
            chains[arm] = build_ask_chain([runner.source(config(mode))], llm, multi_hop=args.max_hops,
                                          k=args.per_hop, retriever=retriever(mode, args.per_hop + 2))
        else:
            raise SystemExit(f"--arms: unknown arm {arm!r} (one of {sorted(ARMS)})")
    return chains


def answer(arm: str, chain: Any, query: Any) -> dict[str, Any]:
    """One scored record."""
    from ctxrag.evaluation.answer_metrics import exact_match, f1_score
    from ctxrag.evaluation.answers import references_of

    refs = references_of(query)
    start = time.perf_counter()
    out = chain.invoke(query.text)
    seconds = time.perf_counter() - start
    text = str(out.get("answer", ""))
    hops = out.get("hops") or []
    return {"arm": arm, "id": query.id, "question": query.text, "answer": text,
            "model_answer": str(out.get("model_answer", "")), "references": refs,
            "em": exact_match(text, refs), "f1": f1_score(text, refs),
            "model_f1": f1_score(str(out.get("model_answer", "")), refs),
            "hops": sum(1 for h in hops if h["query"]) if hops else 1, "queries": [h["query"] for h in hops],
            "facts": [h["fact"] for h in hops], "answered": bool(out.get("model_answer")),
            "supported": out.get("supported"), "seconds": round(seconds, 1)}


def run(args: argparse.Namespace, arms: list[str]) -> list[dict[str, Any]]:
    dataset, queries = load_questions(args.questions, args.seed)
    records = read_records(args.records)
    done = {(r["arm"], r["id"]) for r in records}
    todo = [(q, arm) for q in queries for arm in arms if (arm, q.id) not in done]
    if not todo:
        return records
    chains = build_arms(arms, dataset, args)
    args.records.parent.mkdir(parents=True, exist_ok=True)
    with args.records.open("a", encoding="utf-8") as sink:
        for q, arm in todo:
            rec = answer(arm, chains[arm], q)
            records.append(rec)
            sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
            sink.flush()
            print(f"{arm:15s} f1={rec['f1']:.2f} hops={rec['hops']} {rec['seconds']:5.1f}s  {rec['answer'][:60]!r} "
                  f"<- {rec['references'][:2]}", file=sys.stderr, flush=True)
    return records


def _pct(values: list[float]) -> float:
    return round(100 * statistics.mean(values), 1) if values else 0.0


def report(records: list[dict[str, Any]], args: argparse.Namespace, arms: list[str]) -> None:
    _, queries = load_questions(args.questions, args.seed)
    wanted = [q.id for q in queries]
    present = [a for a in ARMS if any(r["arm"] == a for r in records)]
    by = {(r["arm"], r["id"]): r for r in records}
    common = [i for i in wanted if all((a, i) in by for a in present)]  # the questions every arm answered
    rows, spread = [], []
    for arm in present:
        mine = [by[(arm, i)] for i in common]
        if not mine:
            continue
        hops = Counter(r["hops"] for r in mine)
        rows.append([ARMS[arm], len(mine), _pct([r["em"] for r in mine]), _pct([r["f1"] for r in mine]),
                     _pct([r["model_f1"] for r in mine]), round(statistics.mean(r["hops"] for r in mine), 2),
                     _pct([float(r["answered"]) for r in mine]),
                     round(statistics.median(r["seconds"] for r in mine), 1)])
        if arm != "single":
            for n in sorted(hops):
                on = [r for r in mine if r["hops"] == n]
                spread.append([ARMS[arm], n, len(on), _pct([r["f1"] for r in on])])
    table = Table(
        caption=f"MuSiQue, the same {len(common)} questions for every arm, local 1.5B",
        columns=["arm", "questions", "EM", "F1", "F1 of the model's phrase", "hops (mean)", "answered %",
                 "s/answer p50"],
        rows=rows,
        notes=["Single shot: one retrieval (hybrid, top 4), `ExtractiveAnswer`, the evidence check on, as "
               "`ctxrag eval answers --format musique --answer-style short -k 4` answers; its hops column is 1.",
               f"Iterative: at most {args.max_hops} hops, {args.per_hop} new passages read per hop; answered: the "
               "loop ended with an answer (else the answer is the 'nothing found' notice and scores 0).",
               "The machine was shared with other engineers' tests during the run: seconds are indicative only.",
               *args.note])
    tables = [table]
    if spread:
        tables.append(Table(caption="iterative arms: questions and F1 by hops used",
                            columns=["arm", "hops", "questions", "F1"], rows=spread))
    n_arg = f" --questions {args.questions}" if args.questions != 30 else ""
    write_page_data(
        "multihop_answers", title="Multi-hop answers: iterative retrieval vs single shot",
        measures="exact match and F1 of short answers to MuSiQue multi-hop questions with the local 1.5B, and the "
                 "hops the iterative chain used, beside the single-shot answer, in one run",
        data="MuSiQue-Ans sample via HippoRAG (`../shared/data/multihop`): 100 train questions (2-4 hops), their 1,890 "
             "passages and gpt-3.5-turbo OpenIE triplets; MuSiQue CC BY 4.0, HippoRAG MIT. The first n questions of "
             "the seed-0 order (the order `ctxrag eval answers --sample 100 --seed 0` uses). Model: "
             "Qwen2.5-Coder-1.5B-Instruct Q4_K_M in process (llama.cpp), temperature 0",
        command=f"python bench/bench_multihop.py{n_arg} --arms {','.join(arms)}",
        tables=tables)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=30, help="first N questions of the seeded order (max 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="single,multihop", help=f"comma-separated: {', '.join(ARMS)}")
    parser.add_argument("-k", "--k", type=int, default=4, help="passages of the single-shot answer")
    parser.add_argument("--max-hops", type=int, default=3)
    parser.add_argument("--per-hop", type=int, default=3, help="new passages read per hop")
    parser.add_argument("--records", type=Path, default=OUT / "records.jsonl", help="JSONL records (resumable)")
    parser.add_argument("--home", type=Path, default=OUT / "home", help="CTXRAG_HOME of the run (embedding cache)")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--note", action="append", default=[], help="a note for the page (repeatable)")
    args = parser.parse_args()
    if not 1 <= args.questions <= 100:
        raise SystemExit(f"--questions must be 1..100, got {args.questions}")
    if not (DATA / "musique_train.json").is_file():
        raise SystemExit(f"{DATA}: the MuSiQue sample is missing")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    records = read_records(args.records) if args.report_only else run(args, arms)
    report(records, args, arms)


if __name__ == "__main__":
    main()
