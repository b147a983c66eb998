"""Short answers through `ExtractiveAnswer` versus the chain before it was split out, and the stock LangChain chain
measured in the same `ctxrag eval answers` run: a page from the runs' JSON files.

    # the same command on the code before and after the split, the model's replies cached between them
    # (LangChain SQLiteCache), so identical prompts give identical replies:
    ctxrag eval answers --format squad DRCD_dev.json --config bm25 -k 1 --sample 200 --seed 0 --limit N \\
        --answer-style short --max-tokens 48 --json before.json        # at the commit before the split
    ctxrag eval answers ... --json after.json                          # after it (adds the stock chain's row)
    python bench/bench_short_answers.py before.json after.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pagedata import Table, write_page_data  # noqa: E402


def _rows(doc: dict) -> dict[str, dict]:
    return {r["config"]["name"]: r for r in doc["results"]}


def _evidence(result: dict) -> str:
    """The evidence check a result's chain answered with, as the page says it."""
    name = result.get("evidence", "plain")  # results written before the option answered with the plain check
    return {"plain": "plain (`EvidenceCheck(llm)`, no key-term stages)",
            "default": "the product's (`default_evidence_check`: key-term stages over the corpus's BM25)",
            "off": "off"}.get(name, name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--out-dir", type=Path, default=None)
    args = ap.parse_args()
    before, after = json.loads(args.before.read_text("utf-8")), json.loads(args.after.read_text("utf-8"))
    old = next(iter(_rows(before).values()))
    new = _rows(after)
    ours = next(r for name, r in new.items() if not name.startswith("stock"))
    old_q = {q["id"]: q["answer"] for q in old["per_query"]}
    same = sum(old_q.get(q["id"]) == q["answer"] for q in ours["per_query"])

    def row(label: str, r: dict) -> list:
        m = r["metrics"]
        return [label, r["queries"], round(100 * m["em"], 1), round(100 * m["f1"], 1),
                round(100 * m["model_f1"], 1) if "model_f1" in m else "—"]

    rows = [row("build_rag_chain(answer_style='short') before the split", old),
            row("build_rag_chain(answer=ExtractiveAnswer(llm))", ours)]
    rows += [row(name, r) for name, r in new.items() if name.startswith("stock")]
    write_page_data(
        "answers_short",
        title="Short answers: ExtractiveAnswer, the chain before it, and a stock LangChain chain",
        measures="exact match and F1 of short answers on DRCD dev, and whether moving the short-answer rules out of "
                 "build_rag_chain changed any answer",
        data=f"DRCD dev, the first {ours['queries']} questions of the seeded 200-question sample (seed 0); "
             "BM25 top-1 paragraph; the local Qwen2.5-Coder-1.5B, max 48 tokens",
        command="see bench/bench_short_answers.py (two `ctxrag eval answers` runs sharing an LLM cache)",
        tables=[Table(caption="Short answers (same questions, same model)",
                      columns=["chain", "questions", "EM %", "F1 %", "F1 of the model's own phrase %"], rows=rows),
                Table(caption="Answers unchanged by the split", columns=["same answers", "questions"],
                      rows=[[same, len(ours["per_query"])]])],
        notes=["A small sample: the machine was shared by several CPU-heavy jobs (see the load average); the stock "
               "chain's seconds per answer are not comparable for the same reason.",
               f"Evidence check: {_evidence(ours)} (`ctxrag eval answers --evidence`; runs before 2026-11-29 had no "
               "such option and answered with the plain check).",
               "The second run found every ctxrag prompt in the LLM cache filled by the first: the prompts are "
               "byte-identical, so the answers are the model's same replies through the same span snapping."],
        out_dir=args.out_dir,
    )
    for r in rows:
        print(r)
    print(f"same answers: {same}/{len(ours['per_query'])}")


if __name__ == "__main__":
    main()
