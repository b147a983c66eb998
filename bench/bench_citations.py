"""Citations on the right chunk: does each answer cite the chunk that holds its facts? The model's own `[n]` versus
the same answers after the sentence-by-sentence check (`ctxrag.chains.citations.map_citations`).

    python bench/bench_citations.py generate --sets demo,own --out DEMO              # the LLM part, as `ctxrag demo`
    python bench/bench_citations.py generate --sets drcd --drcd 40 --out DRCD1       # DRCD, a seeded sample
    python bench/bench_citations.py generate --sets drcd --drcd 100 --drcd-from 40 --out DRCD2   # more of it
    python bench/bench_citations.py score DEMO DRCD1 DRCD2 --read 16 --new-from 40

``generate`` answers with the local model. The 6 demo questions and the questions of
bench/data/citation_questions_own.json (written for this benchmark, in both languages, not used to choose the check's
rules) run exactly what `ctxrag demo` runs over the shipped sample corpus: its ingest (no contexts), its chain
(`ctxrag.chains.ask.build_ask_chain` through `ctxrag.cli.query.answer_chain`: hybrid k=4, the relevance gate, the default answer length). A seeded sample of
DRCD dev questions is answered over all 1,000 DRCD paragraphs by the plain chain (`build_rag_chain`, gate off,
ctxrag's in-memory `BM25Retriever`, jieba, k=3, at most 160 tokens: no embedding of the corpus on a loaded machine).
It stores each answer with its numbered chunks, so ``score`` re-checks them without the model.

- DRCD: the gold chunks are the retrieved chunks that contain a reference answer. Precision: cited chunks that are
  gold / cited chunks (answers that cite something and have a gold chunk among the retrieved); recall: answers whose
  cited chunks include a gold chunk / answers with a gold chunk among the retrieved.
- Demo and own questions: an answer is cited correctly when it cites its question's source file and every other
  chunk it cites holds one of the question's key facts (so a wrong answer, whose facts are elsewhere, counts as
  miscited; the per-question table says whether the answer states the key facts).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from pagedata import SHARED_DATA, Table, write_page_data  # noqa: E402

from langchain_core.documents import Document  # noqa: E402

from ctxrag.chains.citations import cited_numbers, map_citations  # noqa: E402
from ctxrag.evaluation.answer_metrics import key_fact_hits  # noqa: E402

DRCD = SHARED_DATA / "chinese" / "DRCD_dev.json"
QUESTIONS = {"demo": ROOT / "examples" / "sample_questions.json",
             "own": ROOT / "bench" / "data" / "citation_questions_own.json"}
"""Questions over examples/sample_corpus: the demo's, and ones written for this benchmark (not used to tune it)."""


def _record(question: str, out: dict[str, Any], seconds: float, **extra: Any) -> dict[str, Any]:
    docs = out["documents"]
    # the model's own text: the chain's answer carries the markers the check set, and this page scores both
    return {"question": question, "answer": out.get("answer_as_written") or out["answer"], "seconds": round(seconds, 1), "supported": out.get("supported"),
            "documents": [{"text": d.page_content, "source": d.metadata.get("source"),
                           "chunk_id": d.metadata.get("chunk_id") or d.id} for d in docs], **extra}


def _arms(spec: str) -> list[int]:
    """``--focus`` as a list of answer_focus_chars arms (0: whole chunks); ValueError naming a bad one."""
    arms = list(dict.fromkeys(int(a) for a in spec.split(",") if a.strip()))
    if not arms or any(a < 0 for a in arms):
        raise ValueError(f"--focus: comma-separated characters >= 0 (0: whole chunks), got {spec!r}")
    return arms


def generate(args: argparse.Namespace) -> None:
    import os

    os.environ["CTXRAG_HOME"] = str(args.home)  # the CLI's assembly reads the process settings
    from ctxrag.chains.focus import SentenceFocus
    from ctxrag.chains.key_terms import KeyTerms
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.cli.query import answer_chain, demo_ingest
    from ctxrag.kb import KnowledgeBase
    from ctxrag.models.chat import make_chat_model
    from ctxrag.resource_paths import demo_corpus
    from ctxrag.retrievers.bm25 import BM25Retriever
    from ctxrag.settings import get_settings

    get_settings.cache_clear()
    settings = get_settings()
    arms = _arms(args.focus) if args.focus else [None]
    out = Path(args.out)
    records: list[dict[str, Any]] = json.loads(out.read_text("utf-8")) if out.exists() else []
    done = {(r["question"], r.get("focus")) for r in records}

    def answer(chain: Any, question: str, arm: int | None, **extra: Any) -> None:
        start = time.perf_counter()
        res = chain.invoke(question)
        records.append(_record(question, res, time.perf_counter() - start, focus=arm, **extra))
        print(f"[focus={arm}] " + records[-1]["answer"][:200].replace("\n", " "), file=sys.stderr, flush=True)
        out.write_text(json.dumps(records, ensure_ascii=False, indent=1), encoding="utf-8")

    sets = args.sets.split(",")
    corpus_sets = [s for s in ("demo", "own") if s in sets]
    if corpus_sets:
        # exactly what `ctxrag demo` runs: its ingest (no contexts), its chain (hybrid k=4, the relevance gate,
        # the default answer length) and the default local model; one chain per focus arm (None: the setting)
        kb = KnowledgeBase.open("citations-demo", settings, create=True)
        demo_ingest(kb, demo_corpus(), progress=False)
        llm = make_chat_model(settings)
        chains = {arm: answer_chain(["citations-demo"], llm, focus=arm) for arm in arms}
    for name in corpus_sets:
        for item in json.loads(QUESTIONS[name].read_text("utf-8")):
            for arm in arms:  # the arms of one question one after the other: a stopped run keeps them paired
                if (item["question"], arm) not in done:
                    answer(chains[arm], item["question"], arm, set=name, expected_source=item["source"],
                           key_facts=item["key_facts"])
    if "drcd" not in sets:
        return

    paragraphs, asked = drcd_set()
    bm25 = BM25Retriever.from_documents(paragraphs, tokenizer="chinese", k=args.k)
    terms = KeyTerms.from_texts([d.page_content for d in paragraphs], tokenizer="chinese")
    llm = make_chat_model(settings, max_tokens=args.max_tokens)
    drcd_chains = {arm: build_rag_chain(bm25, llm, gate=False,
                                        focus=SentenceFocus(arm, terms=terms) if arm else None) for arm in arms}
    for question, refs in random.Random(args.seed).sample(asked, args.drcd)[args.drcd_from:]:
        for arm in arms:
            if (question, arm) not in done:
                answer(drcd_chains[arm], question, arm, set="drcd", references=refs)


def _docs(rec: dict[str, Any]) -> list[Document]:
    return [Document(d["text"], metadata={"source": d["source"], "chunk_id": d["chunk_id"]}) for d in rec["documents"]]


def _own(rec: dict[str, Any]) -> list[int]:
    """The model's own valid citations."""
    return [n for n in cited_numbers(rec["answer"]) if 1 <= n <= len(rec["documents"])]


def _checked(rec: dict[str, Any]) -> list[int]:
    return [s["n"] for s in map_citations(rec["answer"], _docs(rec))["sources"]]


def states_reference(rec: dict[str, Any]) -> bool:
    """Whether the answer states one of the reference answers as written."""
    return any(r and r in rec["answer"] for r in rec["references"])


def _gold(rec: dict[str, Any]) -> set[int]:
    return {i for i, d in enumerate(rec["documents"], 1) if any(r and r in d["text"] for r in rec["references"])}


def drcd_scores(recs: list[dict[str, Any]], cite: Any) -> dict[str, float]:
    hit = cited_total = answers = with_gold = recalled = silent = 0
    right_hit = right_total = 0
    for rec in recs:
        gold = _gold(rec)
        if not gold:
            continue
        with_gold += 1
        cited = cite(rec)
        if not cited:
            silent += 1
            continue
        answers += 1
        cited_total += len(cited)
        hit += len(set(cited) & gold)
        recalled += bool(set(cited) & gold)
        if states_reference(rec):
            right_total += len(cited)
            right_hit += len(set(cited) & gold)
    return {"precision": hit / max(1, cited_total), "recall": recalled / max(1, with_gold),
            "precision_right": right_hit / max(1, right_total), "answers": answers, "with_gold": with_gold,
            "uncited": silent}


def demo_correct(rec: dict[str, Any], cited: list[int]) -> bool:
    """Cites the question's source file, and every other chunk it cites holds one of the key facts as written."""
    if not cited:
        return False
    docs = rec["documents"]

    def file(n: int) -> str:
        return Path(str(docs[n - 1]["source"])).name

    right = all(file(n) == rec["expected_source"] or any(key_fact_hits(docs[n - 1]["text"], rec["key_facts"]))
                for n in cited)
    return right and rec["expected_source"] in {file(n) for n in cited}


def _files(rec: dict[str, Any], cited: list[int]) -> str:
    return ", ".join(str(Path(str(rec["documents"][n - 1]["source"])).name) for n in cited) or "—"


def score(args: argparse.Namespace) -> None:
    recs = [r for path in args.answers for r in json.loads(Path(path).read_text(encoding="utf-8"))]
    if len({r.get("focus") for r in recs}) > 1:
        raise SystemExit("the answers hold several focus arms: score them with bench/bench_focus_arms.py citations")
    demo = [r for r in recs if r["set"] == "demo"]
    own = [r for r in recs if r["set"] == "own"]
    drcd = [r for r in recs if r["set"] == "drcd"]
    rows = []
    for name, cite in (("the model's own [n]", _own), ("after the citation check", _checked)):
        d = drcd_scores(drcd, cite)
        right = sum(demo_correct(r, cite(r)) for r in demo)
        right_own = sum(demo_correct(r, cite(r)) for r in own)
        rows.append([name, f"{right}/{len(demo)}", f"{right_own}/{len(own)}", round(100 * d["precision"], 1),
                     round(100 * d["precision_right"], 1), round(100 * d["recall"], 1),
                     f"{d['answers']}/{d['with_gold']}"])
    if 0 < args.read < len(drcd):  # the answers not read while the check's rules were chosen
        d = drcd_scores(drcd[args.read:], _checked)
        rows.append([f"after the check, DRCD answers {args.read + 1}-{len(drcd)} only (held out)", "—", "—",
                     round(100 * d["precision"], 1), round(100 * d["precision_right"], 1), round(100 * d["recall"], 1),
                     f"{d['answers']}/{d['with_gold']}"])
    if 0 < args.new_from < len(drcd):  # answered by this run's generate --drcd-from
        d = drcd_scores(drcd[args.new_from:], _checked)
        rows.append([f"after the check, DRCD answers {args.new_from + 1}-{len(drcd)} only (a later run)", "—", "—",
                     round(100 * d["precision"], 1), round(100 * d["precision_right"], 1), round(100 * d["recall"], 1),
                     f"{d['answers']}/{d['with_gold']}"])
    per_q = [[r["set"], r["question"], _files(r, _own(r)), _files(r, _checked(r)), r["expected_source"],
              "yes" if all(key_fact_hits(r["answer"], r["key_facts"])) else "no",
              "yes" if demo_correct(r, _checked(r)) else "no"] for r in demo + own]
    statuses: dict[str, int] = {}
    for r in recs:
        for c in map_citations(r["answer"], _docs(r))["citations"]:
            statuses[c["status"]] = statuses.get(c["status"], 0) + 1
    secs = sorted(r["seconds"] for r in recs)
    off_gold = [r for r in drcd if (g := _gold(r)) and set(_checked(r)) - g]
    misses = [r for r in demo + own if not demo_correct(r, _checked(r))]
    write_page_data(
        "citations",
        title="Citations on the right chunk",
        measures="whether an answer's citations point at the chunks holding its facts: the model's own [n] vs the "
                 "sentence-by-sentence check of `map_citations`",
        data=f"the {len(demo)} demo questions (examples/sample_questions.json) and {len(own)} questions written for "
             "this benchmark (bench/data/citation_questions_own.json), both answered as `ctxrag demo` answers: the "
             "shipped sample corpus ingested without contexts, `answer_chain` (hybrid k=4, the relevance gate on, the "
             f"default answer length); and {len(drcd)} DRCD dev questions (the first {len(drcd)} of a seeded sample, "
             f"seed {args.seed}; BM25 over the 1,000 paragraphs, k=3, gate off, at most 160 tokens); all answered once "
             "by the local Qwen2.5-Coder-1.5B (full cited answers, temperature 0)",
        command="python bench/bench_citations.py generate --sets demo,own --out DEMO && "
                "python bench/bench_citations.py generate --sets drcd --drcd 40 --out DRCD1 && "
                f"python bench/bench_citations.py generate --sets drcd --drcd {len(drcd)} --drcd-from 40 --out DRCD2 && "
                f"python bench/bench_citations.py score DEMO DRCD1 DRCD2 --read {args.read} --new-from {args.new_from}",
        tables=[
            Table(caption="Citation accuracy", columns=["citations", "demo cited correctly",
                                                       "own questions cited correctly", "DRCD precision %",
                                                       "DRCD precision %, answers stating a reference",
                                                       "DRCD recall %", "DRCD answers citing / with a gold chunk"],
                  rows=rows),
            Table(caption="Questions over the demo corpus: the cited files",
                  columns=["set", "question", "model cited", "after the check", "expected", "answer states the facts",
                           "cited correctly"], rows=per_q),
            Table(caption="Sentence verdicts of the check (all answers)", columns=["status", "sentences"],
                  rows=[[k, v] for k, v in sorted(statuses.items())]),
        ],
        notes=[f"Answers took {secs[len(secs) // 2]:.0f} s each (median) on a shared, loaded machine (not a speed "
               "measurement).",
               "Precision counts every cited chunk; recall counts answers. Gold = a retrieved chunk containing a "
               "reference answer string, so an answer citing a chunk that paraphrases the fact counts as wrong, and so "
               "does a wrong answer citing the chunk that holds what it says; the second precision column counts only "
               "answers that state a reference answer as written.",
               f"After the check, {len(off_gold)} DRCD answers cite a chunk without a reference answer; "
               f"{sum(not states_reference(r) for r in off_gold)} of them do not state a reference answer (wrong or "
               "off-topic answers, whose sentences the check cites to the chunk that holds what they say). Of the "
               f"{len(misses)} demo and own questions not cited correctly, "
               f"{sum(not all(key_fact_hits(r['answer'], r['key_facts'])) for r in misses)} answers do not state the "
               "key facts (the model answered another fact, or retrieval missed the source).",
               f"How the check's rules were chosen: the rules added on 26 Nov (a citation-only sentence such as "
               "'Source: [3]' is checked against the sentence before it, and an answer of markers alone cites nothing; "
               "of several chunks holding a sentence, one adding no facts beyond the better ones is dropped, words "
               "every retrieved chunk shares not counting; a marker opening a line labels what follows; a number with "
               "another unit does not hold a figure) were written after reading the demo answers, the first "
               f"{args.read} DRCD answers (so those are not held out; the held-out row scores the rest) and, for the "
               "last rule, one own-question answer (a '30 days' cited to a chunk with '30 minutes').", *args.note],
        out_dir=args.out_dir,
    )
    for row in rows:
        print(row)
    for row in per_q:
        print(row)
    print(statuses)


def drcd_set() -> tuple[list[Document], list[tuple[str, list[str]]]]:
    """DRCD dev's 1,000 paragraphs as documents (source ``drcd://<id>``, the article title) and its (question,
    reference answers) pairs, in the file's order."""
    data = json.loads(DRCD.read_text(encoding="utf-8"))["data"]
    paragraphs = [Document(p["context"], id=p["id"], metadata={"source": f"drcd://{p['id']}", "title": art["title"],
                                                                "chunk_id": p["id"]})
                  for art in data for p in art["paragraphs"]]
    asked = [(q["question"], [a["text"] for a in q["answers"]]) for art in data for p in art["paragraphs"]
             for q in p["qas"]]
    return paragraphs, asked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--drcd", type=int, default=40)
    g.add_argument("--drcd-from", type=int, default=0,
                   help="skip the first N questions of the seeded sample (answered by an earlier run)")
    g.add_argument("--sets", default="demo,drcd", help="comma-separated: demo, own, drcd")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("-k", type=int, default=3)
    g.add_argument("--max-tokens", type=int, default=160)
    g.add_argument("--home", type=Path, default=Path("/tmp/ctxrag_citations_home"))
    g.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "citation_answers.json",
                   help="answers file (an existing one is resumed: questions and arms in it are not asked again)")
    g.add_argument("--focus", default="", help="comma-separated answer_focus_chars arms, each question answered in "
                   "each (0: whole chunks); empty: the answer_focus_chars setting, one arm")
    s = sub.add_parser("score")
    s.add_argument("answers", type=Path, nargs="+", help="answer files written by generate")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--read", type=int, default=0,
                   help="how many DRCD answers (from the first) were read while choosing the check's rules: the rest "
                        "are also scored on their own, as held out")
    s.add_argument("--out-dir", type=Path, default=None)
    s.add_argument("--note", action="append", default=[], help="a note for the page (e.g. where answers came from)")
    s.add_argument("--new-from", type=int, default=0,
                   help="DRCD answers past this many came from a later generate run: scored in a row of their own")
    args = ap.parse_args()
    if args.cmd == "generate":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        generate(args)
    else:
        score(args)


if __name__ == "__main__":
    main()
