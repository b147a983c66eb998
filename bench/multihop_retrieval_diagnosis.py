"""Diagnosis of multi-hop retrieval on MuSiQue without the chat model: would one retrieval for the whole question,
or one per sub-question (MuSiQue's own decomposition, earlier answers filled in: the ceiling of a perfect plan), find
the supporting paragraphs? Per retrieval mode (hybrid, graph), top ``k`` per retrieval.

    python bench/multihop_retrieval_diagnosis.py --start 40 --questions 30 --out bench/out/multihop/retrieval.json

Rows per mode: supporting paragraphs found by the whole question's top k and top ``k * hops`` (the passages a loop
of that many hops could show), and by each gold sub-question's own top k (its own supporting paragraph), overall and
by the sub-question's position (first hop, later hops). Output: JSON for `bench_multihop.py --retrieval-diagnosis`.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_multihop import DATA, OUT, load_questions  # noqa: E402

_REF = re.compile(r"#(\d)")


def gold_steps(raw: dict[str, Any], id_of: dict[str, str]) -> list[tuple[str, str]]:
    """MuSiQue's decomposition as (sub-question with the gold answers of earlier steps filled in, its supporting
    paragraph's corpus id)."""
    steps, answers = [], []
    for step in raw["question_decomposition"]:
        text = _REF.sub(lambda m: answers[int(m.group(1)) - 1] if int(m.group(1)) <= len(answers) else m.group(0),
                        step["question"]).replace(">>", " ")
        para = raw["paragraphs"][step["paragraph_support_idx"]]
        steps.append((text, id_of.get(f"{para['title']}\n{para['paragraph_text']}", "missing")))
        answers.append(step["answer"])
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", type=int, default=40)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--modes", default="hybrid,graph")
    parser.add_argument("--home", type=Path, default=OUT / "home")
    parser.add_argument("--out", type=Path, default=OUT / "retrieval.json")
    args = parser.parse_args()

    from ctxrag.enums import SearchMode
    from ctxrag.evaluation.experiments import ExperimentConfig
    from ctxrag.evaluation.runner import EvalRunner
    from ctxrag.schema import chunk_key
    from ctxrag.settings import Settings

    dataset, queries = load_questions(args.questions, 0, args.start)
    raw = {str(q["id"]): q for q in json.loads((DATA / "musique_train.json").read_text("utf-8"))}
    id_of = {item.text: cid for cid, item in dataset.corpus.items()}
    runner = EvalRunner(dataset, [args.k], settings=Settings(home=args.home, contextualize=False), progress=False)
    rows = []
    for name in args.modes.split(","):
        mode = SearchMode(name)
        steps_n = max(len(raw[q.id]["question_decomposition"]) for q in queries)
        retriever = runner.build_retriever(ExperimentConfig(name=name, retrieval=mode), args.k * steps_n)[0]
        whole = wide = gold = first = first_n = later = later_n = 0
        for q in queries:
            steps = gold_steps(raw[q.id], id_of)
            support = {cid for _, cid in steps}
            found = [chunk_key(d) for d in retriever.invoke(q.text)]
            whole += len(support & set(found[: args.k]))
            wide += len(support & set(found[: args.k * len(steps)]))
            gold += len(support)
            for i, (text, cid) in enumerate(steps):
                hit = cid in [chunk_key(d) for d in retriever.invoke(text)][: args.k]
                if i == 0:
                    first, first_n = first + hit, first_n + 1
                else:
                    later, later_n = later + hit, later_n + 1
        rows.append({"mode": name, "questions": len(queries), "supporting": gold,
                     "whole_top_k": round(100 * whole / gold, 1),
                     "whole_top_k_hops": round(100 * wide / gold, 1),
                     "sub_top_k": round(100 * (first + later) / (first_n + later_n), 1),
                     "sub_first_top_k": round(100 * first / first_n, 1),
                     "sub_later_top_k": round(100 * later / later_n, 1) if later_n else None})
        print(json.dumps(rows[-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"start": args.start, "questions": args.questions, "k": args.k, "rows": rows},
                                   indent=1), "utf-8")


if __name__ == "__main__":
    main()
