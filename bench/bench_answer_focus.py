"""Answer focus (``answer_focus_chars``): the same DRCD questions answered with whole chunks and with each chunk cut
to its sentences near the question (`ctxrag.chains.focus.SentenceFocus`), arm by arm for each question in one run.

    python bench/bench_answer_focus.py generate --n 30 --focus 0,300 --out /tmp/lat10/focus.json   # resumes
    python bench/bench_answer_focus.py score /tmp/lat10/focus.json

``generate`` answers as `ctxrag ask` does, over all 1,000 DRCD dev paragraphs: ctxrag's in-memory `BM25Retriever`
(jieba, k=3, as the citations page's DRCD set), the default evidence check (its key-term stages over the paragraphs'
frequencies, as `default_evidence_check` reads them from a knowledge base), the full cited answer (at most 160
tokens), the relevance gate off (every question is answerable). The arms of one question run one after the other,
so a run stopped early has the same questions in every arm. Each record keeps the model's reply, the numbered chunks
and the prompt and completion tokens of every model call (the quote call, then the answer).

``score``: per arm, how many answers abstained, how many state a reference answer as written, the citation check's
precision and recall against the chunks holding a reference (as bench/bench_citations.py scores them), the answers
that differ from the whole-chunk arm, and the prompt tokens of the quote call and of the answer call.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from pagedata import Table, write_page_data  # noqa: E402

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.outputs import LLMResult  # noqa: E402


class _Usage(BaseCallbackHandler):
    """The prompt and completion tokens of each chat model call, in order."""

    def __init__(self) -> None:
        self.calls: list[dict[str, int]] = []

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for gens in response.generations:
            for g in gens:
                usage = getattr(getattr(g, "message", None), "usage_metadata", None) or {}
                self.calls.append({"prompt": int(usage.get("input_tokens", 0)),
                                   "completion": int(usage.get("output_tokens", 0))})


def _corpus(k: int) -> tuple[list[Document], list[tuple[str, list[str]]], Any, Any]:
    """DRCD dev's paragraphs, its (question, references) pairs, the BM25 retriever over the paragraphs (top ``k``)
    and the key terms counted over them."""
    from ctxrag.chains.key_terms import KeyTerms
    from ctxrag.retrievers.bm25 import BM25Retriever

    from bench_citations import drcd_set

    paragraphs, asked = drcd_set()
    terms = KeyTerms.from_texts([d.page_content for d in paragraphs], tokenizer="chinese")
    return paragraphs, asked, BM25Retriever.from_documents(paragraphs, tokenizer="chinese", k=k), terms


def retention(args: argparse.Namespace) -> None:
    """Without the model: of the questions whose retrieved chunks hold a reference answer, how many still hold it
    after the focus, and the characters of chunk text the prompt gets, per arm (a larger sample than the answers)."""
    from ctxrag.chains.focus import SentenceFocus

    _, asked, bm25, terms = _corpus(args.k)
    arms = [int(a) for a in args.focus.split(",")]
    sample = random.Random(args.seed).sample(asked, args.n)
    held = {a: 0 for a in arms}
    chars = {a: 0 for a in arms}
    with_ref = 0
    for question, refs in sample:
        docs = bm25.invoke(question)
        whole = any(r and r in d.page_content for d in docs for r in refs)
        with_ref += whole
        for a in arms:
            focused = SentenceFocus(a, terms=terms).focus(question, docs) if a else docs
            chars[a] += sum(min(len(d.page_content), 1500) for d in focused)
            held[a] += whole and any(r and r in d.page_content for d in focused for r in refs)
    result = {"questions": len(sample), "seed": args.seed, "with_reference": with_ref,
              "arms": {a: {"still_holding": held[a], "chunk_chars_mean": round(chars[a] / len(sample))}
                       for a in arms}}
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps(result, indent=1))


def generate(args: argparse.Namespace) -> None:
    from ctxrag.chains.evidence import (DEFAULT_MIN_COVERAGE_WITH_KEY_TERMS, DEFAULT_MIN_SENTENCE_KEY,
                                        EvidenceCheck)
    from ctxrag.chains.focus import SentenceFocus
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.models.chat import make_chat_model
    from ctxrag.settings import get_settings

    _, asked, bm25, terms = _corpus(args.k)
    llm = make_chat_model(get_settings())
    evidence = EvidenceCheck(llm, key_terms=terms, min_coverage=DEFAULT_MIN_COVERAGE_WITH_KEY_TERMS,
                             min_sentence_key=DEFAULT_MIN_SENTENCE_KEY)
    arms = [int(a) for a in args.focus.split(",")]
    chains = {a: build_rag_chain(bm25, llm, gate=False, evidence=evidence, max_tokens=args.max_tokens,
                                 focus=SentenceFocus(a, terms=terms) if a else None) for a in arms}
    out = Path(args.out)
    records: list[dict[str, Any]] = json.loads(out.read_text("utf-8")) if out.exists() else []
    done = {(r["question"], r["focus"]) for r in records}
    for i, (question, refs) in enumerate(random.Random(args.seed).sample(asked, args.n)):
        for arm in arms:
            if (question, arm) in done:
                continue
            usage = _Usage()
            start = time.perf_counter()
            res = chains[arm].invoke(question, config={"callbacks": [usage]})
            records.append({
                "i": i, "question": question, "references": refs, "focus": arm,
                "answer": res.get("answer_as_written") or res["answer"], "supported": res.get("supported"),
                "seconds": round(time.perf_counter() - start, 1), "calls": usage.calls,
                "documents": [{"text": d.page_content, "source": d.metadata.get("source"),
                               "chunk_id": d.metadata.get("chunk_id") or d.id} for d in res["documents"]]})
            print(i, arm, records[-1]["seconds"], str(records[-1]["answer"])[:120].replace("\n", " "),
                  file=sys.stderr, flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(records, ensure_ascii=False, indent=1), encoding="utf-8")


def score(args: argparse.Namespace) -> None:
    from bench_citations import _checked, drcd_scores, states_reference

    recs = [r for p in args.answers for r in json.loads(Path(p).read_text("utf-8"))]
    arms = sorted({r["focus"] for r in recs})
    # only questions every arm answered: the arms compare the same questions
    counts: dict[str, int] = {}
    for r in recs:
        counts[r["question"]] = counts.get(r["question"], 0) + 1
    recs = [r for r in recs if counts[r["question"]] == len(arms)]
    by_arm = {a: sorted((r for r in recs if r["focus"] == a), key=lambda r: r["i"]) for a in arms}
    base = {r["question"]: r for r in by_arm[arms[0]]}
    rows = []
    for arm, rs in by_arm.items():
        answered = [r for r in rs if r["supported"] is not False]
        d = drcd_scores(answered, _checked)
        quote = [r["calls"][0]["prompt"] for r in rs if r["calls"]]
        answer = [r["calls"][1]["prompt"] for r in rs if len(r["calls"]) > 1]
        changed = sum(r["answer"] != base[r["question"]]["answer"] for r in rs)
        rows.append([f"{arm} (whole chunks)" if arm == 0 else arm, len(rs), len(rs) - len(answered),
                     sum(states_reference(r) for r in rs), round(100 * d["precision"], 1),
                     round(100 * d["recall"], 1), f"{d['answers']}/{d['with_gold']}",
                     "—" if arm == arms[0] else changed,
                     round(statistics.median(quote)) if quote else "—",
                     round(statistics.median(answer)) if answer else "—"])
    def verdict(r: dict[str, Any]) -> str:
        if r["supported"] is False:
            return "abstained"
        return "states a reference" if states_reference(r) else "states no reference"

    flips = []
    for r in by_arm[arms[-1]]:
        b = base[r["question"]]
        if verdict(b) != verdict(r):
            flips.append(f"{r['i'] + 1}. {r['question']} whole chunks: {verdict(b)}; focus {r['focus']}: {verdict(r)}")
    load = args.load or "not recorded"
    tables = [Table(caption="Arms (same questions)",
                    columns=["answer_focus_chars", "questions", "abstained", "answers stating a reference",
                             "citation precision %", "citation recall %", "answers citing / with a gold chunk",
                             "answers changed vs whole chunks", "quote call prompt tokens (median)",
                             "answer call prompt tokens (median)"], rows=rows)]
    if args.retention:
        ret = json.loads(Path(args.retention).read_text("utf-8"))
        tables.append(Table(
            caption=f"Without the model: the retrieved chunks' reference answers kept by the focus "
                    f"({ret['questions']} questions of the seeded sample, {ret['with_reference']} with a reference "
                    "answer in their top 3)",
            columns=["answer_focus_chars", "reference still in the focused chunks", "chunk characters per prompt "
                     "(mean)"],
            rows=[[f"{a} (whole chunks)" if a == "0" else int(a), f"{v['still_holding']}/{ret['with_reference']}",
                   v["chunk_chars_mean"]] for a, v in ret["arms"].items()]))
    write_page_data(
        "answer_focus",
        title="Answer focus: whole chunks or their sentences near the question",
        measures="what cutting each retrieved chunk to its sentences near the question (answer_focus_chars) does to "
                 "abstention, answers that state the reference, citations after the check, and the prompt tokens of "
                 "the evidence check's quote call and of the answer call",
        data=f"DRCD dev (CC BY-SA 3.0), the first {len(base)} questions of a seeded sample (seed {args.seed}), each "
             "answered in every arm in the same run; BM25 (jieba) over the 1,000 paragraphs, k=3, the relevance gate "
             "off, the default evidence check with its key-term stages over the paragraphs' frequencies, full cited "
             "answers (at most 160 tokens), the local Qwen2.5-Coder-1.5B at temperature 0",
        command="python bench/bench_answer_focus.py generate --n 40 --focus 0,300 --out FOCUS && "
                "python bench/bench_answer_focus.py retention --n 200 --focus 0,300,500 --out RET && "
                "python bench/bench_answer_focus.py score FOCUS --retention RET --load LOAD",
        tables=tables,
        notes=["Stating a reference: a reference answer appears in the answer as written (DRCD is Traditional "
               "Chinese; an answer in Simplified characters misses it in every arm alike). Citation precision and "
               "recall as on the citations page: after the check, gold = a retrieved chunk holding a reference; "
               "abstentions left out.",
               "Prompt tokens are the whole prompt of each call as the model reports it; the answer call re-reads "
               "only what follows the quote call's prefix (llama.cpp prefix reuse), so its cost is smaller than "
               "its count.",
               f"Questions that changed verdict between whole chunks and the last arm: {len(flips)}"
               + ("; " + " | ".join(flips) if flips else "") + ".",
               f"Machine shared with other jobs (load {load}): the seconds are not a speed measurement.",
               *args.note],
        out_dir=args.out_dir,
    )
    for row in rows:
        print(row)
    for f in flips:
        print(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--n", type=int, default=30, help="questions of the seeded sample")
    g.add_argument("--focus", default="0,300", help="comma-separated answer_focus_chars arms (0: whole chunks)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("-k", type=int, default=3)
    g.add_argument("--max-tokens", type=int, default=160)
    g.add_argument("--out", type=Path, default=Path("/tmp/ctxrag_answer_focus.json"))
    r = sub.add_parser("retention", help="without the model: reference answers kept by the focus (larger sample)")
    r.add_argument("--n", type=int, default=200)
    r.add_argument("--focus", default="0,300,500")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("-k", type=int, default=3)
    r.add_argument("--out", type=Path, default=Path("/tmp/ctxrag_focus_retention.json"))
    s = sub.add_parser("score")
    s.add_argument("answers", type=Path, nargs="+")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--retention", type=Path, default=None, help="the file `retention` wrote, for its table")
    s.add_argument("--load", default="", help="the load average during the run, for the page")
    s.add_argument("--note", action="append", default=[])
    s.add_argument("--out-dir", type=Path, default=None)
    args = ap.parse_args()
    {"generate": generate, "retention": retention, "score": score}[args.cmd](args)


if __name__ == "__main__":
    main()
