"""Benchmark: multi-hop answers by iterative retrieval (`ctxrag.chains.multihop.MultiHopAnswer`) beside today's
single-shot answer, on MuSiQue, with the local 1.5B: EM / F1, hops used, seconds per answer.

    python bench/bench_multihop.py --questions 30               # first 30 of the seeded sample, both arms
    python bench/bench_multihop.py --questions 100              # every question (hours on 2 cores)
    python bench/bench_multihop.py --arms multihop-graph        # the loop over Graph RAG retrieval
    python bench/bench_multihop.py --start 40 --questions 8 --arms plan,agent --records dev.jsonl  # a dev slice
    python bench/bench_multihop.py --report-only                # the page from the records so far
    python bench/bench_multihop.py --questions 20 --arms bridge-graph,single-graph --keep-previous  # new arms, the
                                                                # earlier run's tables kept below them
    python bench/bench_multihop.py --start 20 --questions 20 --arms bridge-graph,single-graph --label "held out" \
        --compare single-graph,bridge-graph --other-records first20.jsonl --keep-tables "previous run"
                                                                # a held-out slice, the first 20 from their records
                                                                # below it, the two arms compared per slice on top

Arms, the same model (the default GGUF in process, temperature 0), the same questions, one question at a time
(every arm answers question i before question i+1, so an interrupted run leaves the arms on the same questions):

- ``single``: today's single-shot answer, as ``ctxrag eval answers --format musique --answer-style short -k 4``
  builds it (`build_ask_chain` over the hybrid top 4, `ExtractiveAnswer`, the gate off, the evidence check on);
- ``single-graph`` / ``single-fusion``: the same single shot over the graph retriever's top 4, or over the hybrid
  and graph lists fused by RRF (equal weights);
- ``bridge`` / ``bridge-graph`` / ``bridge-fusion``: `MultiHopAnswer` with ``bridge`` (as ``ctxrag ask --multi-hop
  --bridge``): per hop the model writes only the missing name (a short search) or the answer, at most ``--max-hops``
  retrievals of ``--per-hop`` new passages, then `ExtractiveAnswer` over every passage read; ``loop_f1`` in the
  records scores the loop's own last answer (the free short answer) beside it;
- ``multihop``: `MultiHopAnswer` (`build_ask_chain` with ``multi_hop``, as ``ctxrag ask --multi-hop``) over the
  same hybrid retriever (at most ``--max-hops`` hops, ``--per-hop``
  new passages read per hop);
- ``multihop-graph``: the same loop over the graph retriever (``--mode graph``: HippoRAG-style PageRank over the
  set's gpt-3.5 OpenIE triplets);
- ``plan`` / ``plan-graph``: `MultiHopAnswer` with ``decompose`` (as ``ctxrag ask --multi-hop --decompose``): one
  call splits the question into sub-questions, each answered in a few words over its own top ``--per-hop``;
- ``agent`` / ``agent-graph``: LangChain's ``create_agent`` with the same local model and
  `ctxrag.tools.make_search_tool` over the set (top ``--per-hop``), at most ``--max-hops`` search calls; its last
  reply is the answer as it is.

``--start`` picks a slice further down the order (development slices, outside the reported questions); the diagnosis
fields of each record say, per hop, how many of MuSiQue's supporting paragraphs the passages read hold.

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
        "single-graph": "single shot (graph top 4, short answer)",
        "single-fusion": "single shot (hybrid + graph RRF top 4, short answer)",
        "bridge": "iterative, the missing name asked per hop, short answer (hybrid)",
        "bridge-graph": "iterative, the missing name asked per hop, short answer (graph)",
        "bridge-fusion": "iterative, the missing name asked per hop, short answer (hybrid + graph RRF)",
        "bridge3-graph": "iterative, the missing name asked per hop, at least three retrievals, short answer (graph)",
        "multihop": "iterative retrieval (hybrid)",
        "multihop-graph": "iterative retrieval (graph, PageRank)",
        "plan": "iterative retrieval, decomposition first (hybrid)",
        "plan-graph": "iterative retrieval, decomposition first (graph, PageRank)",
        "agent": "create_agent + search tool (hybrid)",
        "agent-graph": "create_agent + search tool (graph, PageRank)"}
FIRST_READ = {f"{arm}-first": f"{ARMS[arm]}, the first phrase kept (no re-ask)"
              for arm in ("bridge", "bridge-graph", "bridge-fusion")}
"""Pseudo-arms read from a bridge arm's records: its final phrase before the middle-entity re-ask (``first_*``)."""
ARMS.update(FIRST_READ)
AGENT_SYSTEM = ("Answer the question with the search tool: search for one fact at a time, then for the next fact "
                "with the names the results give. End with the answer in a few words.")


def load_questions(n: int, seed: int, start: int = 0) -> tuple[Any, list[Any]]:
    """The MuSiQue dataset and ``n`` of its questions in the seeded sample's order, from position ``start``."""
    from ctxrag.evaluation.datasets import load_dataset

    dataset = load_dataset("musique", [DATA]).sample(100, seed)
    return dataset, dataset.queries[start:start + n]


def _hops(arm: str, queries: list[str]) -> int:
    """Retrievals used: the agent's search calls (none is possible); a chain's hops with a query (single shot: 1)."""
    if arm.startswith("agent"):
        return len(queries)
    return sum(1 for q in queries if q) if queries else 1


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    records += [{**r, "arm": f"{r['arm']}-first", "answer": r["first_answer"], "em": r["first_em"],
                 "f1": r["first_f1"], "model_f1": r["first_model_f1"]}
                for r in records if "first_f1" in r and f"{r['arm']}-first" in FIRST_READ]
    return [{**r, "hops": _hops(r["arm"], r["queries"])} for r in records]


def build_arms(arms: list[str], dataset: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Each arm's chain over the product's retrievers for the set (`EvalRunner.build_retriever`)."""
    from langchain.agents import create_agent

    from ctxrag.chains.ask import build_ask_chain
    from ctxrag.chains.multihop import BRIDGE_MIN_HOPS, MultiHopAnswer
    from ctxrag.enums import SearchMode
    from ctxrag.evaluation.answers import answer_step, evidence_check
    from ctxrag.evaluation.experiments import ExperimentConfig
    from ctxrag.evaluation.runner import EvalRunner, TopK
    from ctxrag.models.chat import make_chat_model
    from ctxrag.retrievers.fusion import FusionRetriever
    from ctxrag.settings import Settings
    from ctxrag.tools import make_search_tool

    settings = Settings(home=args.home, contextualize=False)
    llm = make_chat_model(settings, max_tokens=48, temperature=0.0)
    runner = EvalRunner(dataset, [args.k], settings=settings, progress=sys.stderr.isatty())

    def config(mode: SearchMode) -> Any:
        return ExperimentConfig(name=mode.value, retrieval=mode)

    def retriever(mode: SearchMode, k: int, fusion: bool = False) -> Any:
        if fusion:  # hybrid and graph lists fused by RRF, equal weights
            return FusionRetriever(retrievers=[retriever(SearchMode.HYBRID, k), retriever(SearchMode.GRAPH, k)],
                                   mode="rrf", k=k)
        return runner.build_retriever(config(mode), k)[0]

    chains: dict[str, Any] = {}
    for arm in arms:
        mode = SearchMode.GRAPH if arm.endswith("-graph") else SearchMode.HYBRID
        fusion = arm.endswith("-fusion")
        if arm in ("single", "single-graph", "single-fusion"):
            source = runner.source(config(SearchMode.HYBRID))
            chains[arm] = build_ask_chain([source], llm, gate=False,
                                          evidence=evidence_check(llm, source, args.evidence),
                                          answer=answer_step(llm, "short"),
                                          retriever=TopK(base=retriever(mode, args.k, fusion), k=args.k))
        elif arm in ("bridge", "bridge-graph", "bridge-fusion", "bridge3-graph"):
            # bridge3: as the ask chain runs it, no stop before retrieval BRIDGE_MIN_HOPS; the others: min_hops 2
            least = {"min_hops": min(BRIDGE_MIN_HOPS, args.max_hops)} if arm.startswith("bridge3") else {}
            chains[arm] = MultiHopAnswer(retriever(mode, args.per_hop + 2, fusion), llm, max_hops=args.max_hops,
                                         passages_per_hop=args.per_hop, bridge=True, **least)
        elif arm in ("multihop", "multihop-graph"):
            chains[arm] = build_ask_chain([runner.source(config(mode))], llm, multi_hop=args.max_hops,
                                          k=args.per_hop, retriever=retriever(mode, args.per_hop + 2))
        elif arm in ("plan", "plan-graph"):
            chains[arm] = MultiHopAnswer(retriever(mode, args.per_hop + 2), llm, max_hops=args.max_hops,
                                         passages_per_hop=args.per_hop, decompose=True)
        elif arm in ("agent", "agent-graph"):
            agent_llm = make_chat_model(settings, max_tokens=128, temperature=0.0)
            tool = make_search_tool([runner.source(config(mode))], mode=mode.value, k=args.per_hop)
            chains[arm] = create_agent(agent_llm, tools=[tool], system_prompt=AGENT_SYSTEM)
        else:
            raise SystemExit(f"--arms: unknown arm {arm!r} (one of {sorted(ARMS)})")
    return chains


def run_agent(agent: Any, question: str, max_calls: int) -> dict[str, Any]:
    """The agent's run as the chains' output: its last reply without a tool call is the answer; each call a hop
    (its query, the passages it returned). A run past ``max_calls`` calls (LangGraph's recursion limit) ends without
    an answer."""
    from langchain_core.messages import AIMessage, ToolMessage

    error = ""
    try:
        messages = agent.invoke({"messages": [("user", question)]},
                                {"recursion_limit": 2 * max_calls + 2})["messages"]
    except Exception as exc:  # noqa: BLE001 - a loop that never ends (recursion limit) is a result here
        messages, error = [], f"{type(exc).__name__}: {str(exc)[:200]}"
    turns = [m for m in messages if isinstance(m, AIMessage)]
    final = turns[-1].content if turns and not turns[-1].tool_calls else ""
    documents, hops = [], []
    for m in messages:
        if isinstance(m, AIMessage):
            hops += [{"query": str(c["args"].get("query", "")), "read": [], "fact": ""} for c in m.tool_calls]
        elif isinstance(m, ToolMessage) and hops:
            found = list(m.artifact or [])
            hops[-1]["read"] = list(range(len(documents) + 1, len(documents) + len(found) + 1))
            documents += found
    return {"answer": str(final), "model_answer": str(final), "hops": hops, "documents": documents,
            "error": error}


def answer(arm: str, chain: Any, query: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One scored record, with what the diagnosis needs: per hop, which of the passages read are MuSiQue's
    supporting paragraphs (``gold``)."""
    from ctxrag.evaluation.answer_metrics import exact_match, f1_score
    from ctxrag.evaluation.answers import references_of
    from ctxrag.schema import chunk_key

    refs = references_of(query)
    start = time.perf_counter()
    if arm.startswith("agent"):
        out = run_agent(chain, query.text, args.max_hops)
    else:
        out = chain.invoke(query.text)
    seconds = time.perf_counter() - start
    text = str(out.get("answer", ""))
    hops = out.get("hops") or []
    documents = out.get("documents") or []
    gold = set(query.gold_ids)
    ids = [chunk_key(d) for d in documents]
    return {"arm": arm, "id": query.id, "question": query.text, "answer": text,
            "gold": len(gold), "gold_read": len(gold & set(ids)),
            "gold_by_hop": [sum(ids[n - 1] in gold for n in h.get("read", []) if 0 < n <= len(ids)) for h in hops],
            "answers_by_hop": [h.get("answer", "") for h in hops], "error": out.get("error", ""),
            "model_answer": str(out.get("model_answer", "")), "references": refs,
            "em": exact_match(text, refs), "f1": f1_score(text, refs),
            "model_f1": f1_score(str(out.get("model_answer", "")), refs),
            "loop_answer": str(out.get("loop_answer", "")),
            "loop_f1": f1_score(str(out.get("loop_answer", "")), refs) if out.get("loop_answer") else 0.0,
            "hops": _hops(arm, [h["query"] for h in hops]), "queries": [h["query"] for h in hops],
            "facts": [h["fact"] for h in hops], "answered": bool(out.get("model_answer")),
            "supported": out.get("supported"), "seconds": round(seconds, 1),
            **_first_read(out, documents, query.text, refs)}


def _first_read(out: dict[str, Any], documents: list[Any], question: str, refs: list[str]) -> dict[str, Any]:
    """A bridge arm's final phrase before the middle-entity re-ask (`ExtractiveAnswer`'s ``rejected_answer``),
    snapped and scored as the answer is: the same run's answer had the phrase not been asked for again."""
    from ctxrag.chains.extractive import snap
    from ctxrag.evaluation.answer_metrics import exact_match, f1_score

    if "loop_answer" not in out:
        return {}
    rejected = str(out.get("rejected_answer") or "")
    if not rejected:
        text, phrase = str(out.get("answer", "")), str(out.get("model_answer", ""))
    else:
        span = snap(rejected, documents, question=question)
        text, phrase = (rejected if span is None else f"{span.text} [{span.n}]"), rejected
    return {"rejected_answer": rejected, "first_answer": text, "first_em": exact_match(text, refs),
            "first_f1": f1_score(text, refs), "first_model_f1": f1_score(phrase, refs)}


def run(args: argparse.Namespace, arms: list[str]) -> list[dict[str, Any]]:
    dataset, queries = load_questions(args.questions, args.seed, args.start)
    records = read_records(args.records)
    done = {(r["arm"], r["id"]) for r in records}
    todo = [(q, arm) for q in queries for arm in arms if (arm, q.id) not in done]
    same = {}  # bridge3-graph: a recorded bridge-graph loop that already made every retrieval runs the same
    if args.same_as:
        same = {r["id"]: r for r in read_records(args.same_as)
                if r["arm"] == "bridge-graph" and len(r.get("queries") or []) >= args.max_hops}
    copied = [(q, arm) for q, arm in todo if arm == "bridge3-graph" and q.id in same]
    if copied:
        args.records.parent.mkdir(parents=True, exist_ok=True)
        with args.records.open("a", encoding="utf-8") as sink:
            for q, arm in copied:
                rec = {**same[q.id], "arm": arm, "copied_from": str(args.same_as)}
                records.append(rec)
                sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
    todo = [t for t in todo if t not in copied]
    if args.interleave:  # a run stopped early covers every 20-question slice alike
        pos = {q.id: i for i, q in enumerate(queries)}
        todo.sort(key=lambda t: (pos[t[0].id] % 20, pos[t[0].id]))
    if not todo:
        return records
    chains = build_arms(arms, dataset, args)
    args.records.parent.mkdir(parents=True, exist_ok=True)
    with args.records.open("a", encoding="utf-8") as sink:
        for q, arm in todo:
            rec = answer(arm, chains[arm], q, args)
            records.append(rec)
            sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
            sink.flush()
            print(f"{arm:15s} f1={rec['f1']:.2f} hops={rec['hops']} {rec['seconds']:5.1f}s  {rec['answer'][:60]!r} "
                  f"<- {rec['references'][:2]}", file=sys.stderr, flush=True)
    return records


def replay(args: argparse.Namespace, source: Path) -> list[dict[str, Any]]:
    """A bridge arm's recorded run (``source``) with today's final read: each record's passages retrieved again for
    its recorded searches (the retrieval is deterministic; the record's supporting-paragraph counts are checked), then
    `MultiHopAnswer.final_read` with the chat model behind a reply cache seeded from the record: the first-read
    prompt gets the recorded final phrase, so only a new prompt (the middle-entity re-ask) is decoded. The recorded
    answer becomes ``first_*``; hops, seconds and the loop's answer are the record's. Appended to ``--records``."""
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.runnables import RunnableLambda

    from ctxrag.chains.extractive import clean_phrase
    from ctxrag.chains.multihop import Hop
    from ctxrag.prompts.layers import SHORT_RESTATE, SHORT_RETRY
    from ctxrag.evaluation.answer_metrics import exact_match, f1_score
    from ctxrag.schema import chunk_key

    dataset, queries = load_questions(args.questions, args.seed, args.start)
    wanted = {q.id: q for q in queries}
    old = [r for r in read_records(source) if r["id"] in wanted and r["arm"] in ("bridge", "bridge-graph",
                                                                                     "bridge-fusion")]
    records = read_records(args.records)
    done = {(r["arm"], r["id"]) for r in records}
    todo = [r for r in old if (r["arm"], r["id"]) not in done]
    if not todo:
        return records
    chains = build_arms(sorted({r["arm"] for r in todo}), dataset, args)
    with args.records.open("a", encoding="utf-8") as sink:
        for rec in todo:
            chain, query = chains[rec["arm"]], wanted[rec["id"]]
            documents: list[Any] = []
            seen: set[str] = set()
            hops = []
            for q in rec["queries"]:
                new = [d for d in chain.retriever.invoke(q) if chunk_key(d) not in seen][: chain.passages_per_hop]
                seen.update(chunk_key(d) for d in new)
                hops.append(Hop(query=q, read=list(range(len(documents) + 1, len(documents) + len(new) + 1))))
                documents += new
            gold = set(query.gold_ids)
            by_hop = [sum(chunk_key(documents[n - 1]) in gold for n in h.read) for h in hops]
            decoded: list[str] = []

            calls: list[int] = []

            def seeded(messages: list[BaseMessage],
                       phrase: str = rec.get("rejected_answer") or rec["model_answer"]) -> BaseMessage:
                calls.append(1)
                said = clean_phrase(str(messages[-2].content)) if len(messages) > 2 else ""
                retry = {v.format(phrase=said) for table in (SHORT_RETRY, SHORT_RESTATE) for v in table.values()}
                if len(calls) == 1 or str(messages[-1].content) in retry:
                    return AIMessage(phrase)           # the recorded run decoded this prompt (or its echo retry)
                decoded.append("x")
                return chain.llm.invoke(messages)

            start = time.perf_counter()
            out = chain.model_copy(update={"llm": RunnableLambda(seeded)}).final_read(query.text, documents, hops)
            text, refs = str(out.get("answer", "")), rec["references"]
            new_rec = {**{k: v for k, v in rec.items() if k != "hops"},
                       "answer": text, "model_answer": str(out.get("model_answer", "")),
                       "em": exact_match(text, refs), "f1": f1_score(text, refs),
                       "model_f1": f1_score(str(out.get("model_answer", "")), refs),
                       "rejected_answer": str(out.get("rejected_answer") or ""),
                       "first_answer": rec.get("first_answer", rec["answer"]),
                       "first_em": rec.get("first_em", rec["em"]), "first_f1": rec.get("first_f1", rec["f1"]),
                       "first_model_f1": rec.get("first_model_f1", rec["model_f1"]), "replayed_from": str(source),
                       "replay_passages_match": by_hop == rec["gold_by_hop"], "replay_decoded": len(decoded),
                       "replay_seconds": round(time.perf_counter() - start, 1)}
            records.append(new_rec)
            sink.write(json.dumps(new_rec, ensure_ascii=False) + "\n")
            sink.flush()
            print(f"replay {rec['arm']} f1 {rec['f1']:.2f} -> {new_rec['f1']:.2f} decoded={len(decoded)} "
                  f"match={by_hop == rec['gold_by_hop']} {text[:50]!r} (was {rec['answer'][:40]!r})",
                  file=sys.stderr, flush=True)
    return read_records(args.records)


def _pct(values: list[float]) -> float:
    return round(100 * statistics.mean(values), 1) if values else 0.0


def _by_arm(records: list[dict[str, Any]], wanted: list[str]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Each arm's records on the questions of ``wanted`` that every arm present answered, and how many those are."""
    present = [a for a in ARMS if any(r["arm"] == a and r["id"] in wanted for r in records)]
    by = {(r["arm"], r["id"]): r for r in records}
    common = [i for i in wanted if all((a, i) in by for a in present)]
    return {a: [by[(a, i)] for i in common] for a in present if common}, len(common)


def _score_row(arm: str, mine: list[dict[str, Any]]) -> list[Any]:
    return [ARMS[arm], len(mine), _pct([r["em"] for r in mine]), _pct([r["f1"] for r in mine]),
            _pct([r["model_f1"] for r in mine]), round(statistics.mean(r["hops"] for r in mine), 2),
            _pct([float(r["answered"]) for r in mine]), round(statistics.median(r["seconds"] for r in mine), 1)]


def _diagnosis_row(arm: str, mine: list[dict[str, Any]]) -> list[Any]:
    """Where the answers fail: were the supporting paragraphs read, and is a wrong-scored answer partly right."""
    every = [r for r in mine if r.get("gold") and r.get("gold_read") == r["gold"]]
    rest = [r for r in mine if r not in every]
    gold = sum(r.get("gold", 0) for r in mine)
    return [ARMS[arm], len(mine), round(100 * sum(r.get("gold_read", 0) for r in mine) / gold, 1) if gold else 0.0,
            len(every), _pct([r["f1"] for r in every]) if every else "-",
            _pct([r["f1"] for r in rest]) if rest else "-",
            sum(1 for r in mine if 0 < r["f1"] < 1), sum(1 for r in mine if r["model_f1"] > r["f1"])]


SCORE_COLUMNS = ["arm", "questions", "EM", "F1", "F1 of the model's phrase", "hops (mean)", "answered %",
                 "s/answer p50"]
DIAGNOSIS_COLUMNS = ["arm", "questions", "supporting paragraphs read %", "questions with all read",
                     "F1 (all read)", "F1 (some missing)", "partly right (0 < F1 < 1)", "phrase scored above answer"]


def _where(start: int, questions: int) -> str:
    return f"questions {start}-{start + questions - 1}" if start else f"the first {questions}"


def slice_tables(records: list[dict[str, Any]], start: int, questions: int, args: argparse.Namespace,
                 label: str = "", notes: list[str] | None = None,
                 diagnosis_notes: list[str] | None = None, only: str = "") -> list[Table]:
    """A slice's tables: scores per arm (``notes`` under them), F1 by hops used, the diagnosis; ``only``: these arms
    (comma-separated) and no other."""
    _, queries = load_questions(questions, args.seed, start)
    if only:
        records = [r for r in records if r["arm"] in only.split(",")]
    arms_records, n = _by_arm(records, [q.id for q in queries])
    rows, spread, diagnosis = [], [], []
    for arm, mine in arms_records.items():
        rows.append(_score_row(arm, mine))
        diagnosis.append(_diagnosis_row(arm, mine))
        if not arm.startswith("single") and arm not in FIRST_READ:  # a first read's hops are its arm's
            hops = Counter(r["hops"] for r in mine)
            for h in sorted(hops):
                on = [r for r in mine if r["hops"] == h]
                spread.append([ARMS[arm], h, len(on), _pct([r["f1"] for r in on])])
    where = _where(start, questions)
    tables = [Table(caption=f"MuSiQue, {where} of the seed-0 order{', ' + label if label else ''}, the same {n} "
                            "questions for every arm, local 1.5B", columns=SCORE_COLUMNS, rows=rows,
                    notes=list(notes or []))]
    if spread:
        tables.append(Table(caption=f"{where}: multi-hop arms, questions and F1 by hops used (agent: search calls)",
                            columns=["arm", "hops", "questions", "F1"], rows=spread))
    tables.append(Table(
        caption=f"diagnosis, {where}: supporting paragraphs read (MuSiQue's labels) and answers partly right",
        columns=DIAGNOSIS_COLUMNS, rows=diagnosis, notes=list(diagnosis_notes or [])))
    return tables


def compare_row(records: list[dict[str, Any]], start: int, questions: int, seed: int, first: str, second: str,
                label: str) -> list[Any]:
    """``second`` against ``first`` on the slice's questions both answered: F1 of each, and on how many questions
    ``second`` scored above, below or level with ``first``."""
    _, queries = load_questions(questions, seed, start)
    by = {(r["arm"], r["id"]): r for r in records}
    both = [q.id for q in queries if (first, q.id) in by and (second, q.id) in by]
    a = [by[(first, i)]["f1"] for i in both]
    b = [by[(second, i)]["f1"] for i in both]
    return [f"{_where(start, questions)}{' (' + label + ')' if label else ''}", len(both),
            _pct(a), _pct(b), round(_pct(b) - _pct(a), 1),
            sum(y > x for x, y in zip(a, b)), sum(y < x for x, y in zip(a, b)), sum(y == x for x, y in zip(a, b))]


def report(records: list[dict[str, Any]], args: argparse.Namespace, arms: list[str]) -> None:
    tables: list[Table] = []
    other = read_records(args.other_records) if args.other_records else []
    for n, pair in enumerate(args.compare):
        first, second = (a.strip() for a in pair.split(","))
        rows = [compare_row(records, args.start, args.questions, args.seed, first, second, args.label)]
        rows += [compare_row(records, start, count, args.seed, first, second, label)
                 for start, count, label in args.compare_slice]
        if other:
            rows.append(compare_row(other, args.other_start, args.other_questions, args.seed, first, second,
                                    args.other_label))
        rows = [r for r in rows if r[1]]  # a slice the pair did not both run
        notes = [note.split(":", 1)[1] for note in args.compare_note if note.split(":", 1)[0] == str(n + 1)]
        tables.append(Table(
            caption=f"{ARMS[second]} against {ARMS[first]}, per slice",
            columns=["slice", "questions", f"F1 {first}", f"F1 {second}", "difference", f"{second} above",
                     f"{second} below", "level"], rows=rows, notes=notes))
    tables += slice_tables(records, args.start, args.questions, args, args.label, only=args.table_arms, notes=[
        "Single shot: one retrieval (hybrid, top 4), `ExtractiveAnswer`, the evidence check on, as "
        "`ctxrag eval answers --format musique --answer-style short -k 4` answers; its hops column is 1.",
        f"Iterative: at most {args.max_hops} hops, {args.per_hop} new passages read per hop; decomposition: "
        f"one call splits the question into at most {args.max_hops} sub-questions, each answered in a few "
        f"words over its own top {args.per_hop}; agent: `create_agent` with the local model and "
        f"`ctxrag.tools.make_search_tool` (top {args.per_hop}), at most {args.max_hops} calls (LangGraph's "
        "recursion limit), its last reply scored as it is. Answered: the arm ended with an answer (else the "
        "answer is the 'nothing found' notice and scores 0).",
        "The machine was shared with other engineers' tests during the run: seconds are indicative only.",
        *args.note], diagnosis_notes=[
        "Supporting paragraphs read: of the question's supporting paragraphs, the share among every passage "
        "the arm showed the model. Partly right: the answer shares words with the gold answer but is not it "
        "(a long phrase or a neighbouring fact). Phrase scored above answer: the model's own words score "
        "higher than the answer after snapping to a passage span.", *args.diagnosis_note])
    for start, count, label in args.extra_slice:
        tables += slice_tables(records, start, count, args, label,
                               notes=[n.split(":", 1)[1] for n in args.slice_note if n.split(":", 1)[0] == str(start)],
                               diagnosis_notes=[n.split(":", 1)[1] for n in args.slice_diagnosis_note
                                                if n.split(":", 1)[0] == str(start)])
    if other:
        tables += slice_tables(other, args.other_start, args.other_questions, args, args.other_label,
                               notes=args.other_note, diagnosis_notes=args.other_diagnosis_note)
    if args.dev_records:
        _, dev = load_questions(args.dev_questions, args.seed, args.dev_start)
        ids = {q.id for q in dev}
        dev_records = {a: [r for r in read_records(args.dev_records) if r["arm"] == a and r["id"] in ids]
                       for a in ARMS}
        dev_records = {a: m for a, m in dev_records.items() if m}
        label = f"questions {args.dev_start}-{args.dev_start + args.dev_questions - 1}"
        tables.append(Table(
            caption=f"development slice ({label} of the seed-0 order; each arm on the questions it answered there): "
                    "what chose the settings",
            columns=SCORE_COLUMNS, rows=[_score_row(a, m) for a, m in dev_records.items()],
            notes=["Measured before the run above, on questions outside it; the arms and settings of the run "
                   "above were chosen here.", *args.dev_note]))
        tables.append(Table(caption=f"diagnosis, development slice ({label})", columns=DIAGNOSIS_COLUMNS,
                            rows=[_diagnosis_row(a, m) for a, m in dev_records.items()]))
    if args.retrieval_diagnosis:
        got = json.loads(args.retrieval_diagnosis.read_text("utf-8"))
        k, label = got["k"], f"questions {got['start']}-{got['start'] + got['questions'] - 1}"
        tables.append(Table(
            caption=f"retrieval alone ({label}, no chat model): supporting paragraphs found, top {k} per retrieval",
            columns=["mode", "questions", "supporting paragraphs", f"whole question, top {k} %",
                     f"whole question, top {k} x its hops %", f"each gold sub-question, top {k} %",
                     "first sub-question %", "later sub-questions %"],
            rows=[[r["mode"], r["questions"], r["supporting"], r["whole_top_k"], r["whole_top_k_hops"],
                   r["sub_top_k"], r["sub_first_top_k"], r["sub_later_top_k"]] for r in got["rows"]],
            notes=["`bench/multihop_retrieval_diagnosis.py`: the gold sub-questions are MuSiQue's own decomposition "
                   "with the gold answers of earlier steps filled in, each judged by its own supporting paragraph: "
                   "what a perfect plan would retrieve.", *args.retrieval_note]))
    if args.keep_tables:
        current = json.loads((ROOT / "docs" / "benchmarks" / "data" / "multihop_answers.json").read_text("utf-8"))
        tables += [Table(caption=f"{args.kept_label}: {t['caption']}" if args.kept_label
                         and not t["caption"].startswith("previous run") else t["caption"],
                         columns=t["columns"], rows=t["rows"], notes=list(t.get("notes", [])))
                   for t in current["tables"] if any(t["caption"].startswith(p) for p in args.keep_tables)]
    if args.keep_previous:
        previous = json.loads((ROOT / "docs" / "benchmarks" / "data" / "multihop_answers.json").read_text("utf-8"))
        label = f"previous run (commit {str(previous.get('commit', '?'))[:7]}, {previous.get('date', '?')})"
        tables += [Table(caption=f"{label}: {t['caption']}", columns=t["columns"], rows=t["rows"],
                         notes=list(t.get("notes", []))) for t in previous["tables"]
                   if not t["caption"].startswith("previous run")]
    n_arg = f" --questions {args.questions}" if args.questions != 30 else ""
    write_page_data(
        "multihop_answers", title="Multi-hop answers: iterative retrieval vs single shot vs an agent",
        measures="exact match and F1 of short answers to MuSiQue multi-hop questions with the local 1.5B: the "
                 "iterative chain, the single-shot answer and a create_agent agent with the search tool, in one run; "
                 "and where the answers fail (retrieval of the supporting paragraphs, partly right phrases)",
        data="MuSiQue-Ans sample via HippoRAG (`../shared/data/multihop`): 100 train questions (2-4 hops), their 1,890 "
             "passages and gpt-3.5-turbo OpenIE triplets; MuSiQue CC BY 4.0, HippoRAG MIT. Questions in the seed-0 "
             "order (the order `ctxrag eval answers --sample 100 --seed 0` uses). Model: "
             "Qwen2.5-Coder-1.5B-Instruct Q4_K_M in process (llama.cpp), temperature 0",
        command=args.command or f"python bench/bench_multihop.py{n_arg} --arms {','.join(arms)}",
        tables=tables, out_dir=args.out_dir)


def _slice(text: str) -> tuple[int, int, str]:
    """``START:N:LABEL`` (``--compare-slice``, ``--extra-slice``) as (start, questions, label)."""
    parts = text.split(":", 2)
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()) or int(parts[0]) + int(parts[1]) > 100:
        raise argparse.ArgumentTypeError(f"{text!r}: START:N[:LABEL] within the 100 questions")
    return int(parts[0]), int(parts[1]), parts[2] if len(parts) == 3 else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=30, help="first N questions of the seeded order (max 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first question's position in the seeded order "
                        "(development slices lie outside the reported first 20)")
    parser.add_argument("--arms", default="single,multihop", help=f"comma-separated: {', '.join(ARMS)}")
    parser.add_argument("-k", "--k", type=int, default=4, help="passages of the single-shot answer")
    parser.add_argument("--evidence", choices=("default", "plain", "off"), default="default",
                        help="the single-shot arms' evidence check: the product's (default), the plain thresholds "
                             "without the key-term stages (plain: the page's rows until 29 Nov), or none")
    parser.add_argument("--max-hops", type=int, default=3)
    parser.add_argument("--per-hop", type=int, default=3, help="new passages read per hop")
    parser.add_argument("--records", type=Path, default=OUT / "records.jsonl", help="JSONL records (resumable)")
    parser.add_argument("--home", type=Path, default=OUT / "home", help="CTXRAG_HOME of the run (embedding cache)")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--same-as", type=Path, metavar="RECORDS",
                        help="bridge3-graph: copy a recorded bridge-graph loop that already made --max-hops "
                             "retrievals (the arm would run it unchanged) instead of running it")
    parser.add_argument("--table-arms", default="", metavar="A,B",
                        help="report: the main slice's tables show these arms only (default: every arm in the records)")
    parser.add_argument("--interleave", action="store_true",
                        help="run the questions slice by slice in turn (0, 20, 40, 1, 21, ...)")
    parser.add_argument("--replay", type=Path, metavar="RECORDS",
                        help="a bridge arm's recorded run replayed with today's final read (only new prompts are "
                             "decoded: the middle-entity re-ask), into --records")
    parser.add_argument("--note", action="append", default=[], help="a note for the page (repeatable)")
    parser.add_argument("--diagnosis-note", action="append", default=[], help="a note under the diagnosis")
    parser.add_argument("--dev-records", type=Path, help="records of the development slice, reported beside")
    parser.add_argument("--dev-start", type=int, default=40)
    parser.add_argument("--dev-questions", type=int, default=8)
    parser.add_argument("--dev-note", action="append", default=[], help="a note under the development slice")
    parser.add_argument("--retrieval-diagnosis", type=Path,
                        help="JSON of bench/multihop_retrieval_diagnosis.py, reported beside")
    parser.add_argument("--retrieval-note", action="append", default=[], help="a note under the retrieval table")
    parser.add_argument("--keep-previous", action="store_true",
                        help="append the current page's tables (an earlier run's arms), captioned as the previous run")
    parser.add_argument("--keep-tables", action="append", default=[], metavar="PREFIX",
                        help="keep the current page's tables whose caption starts with PREFIX, as they are "
                             "(repeatable; e.g. 'previous run')")
    parser.add_argument("--label", default="", help="what the slice is, in its caption (e.g. 'held out')")
    parser.add_argument("--other-records", type=Path,
                        help="records of another slice (e.g. the first 20 after a held-out run), reported below")
    parser.add_argument("--other-start", type=int, default=0)
    parser.add_argument("--other-questions", type=int, default=20)
    parser.add_argument("--other-label", default="")
    parser.add_argument("--other-note", action="append", default=[], help="a note under the other slice's scores")
    parser.add_argument("--other-diagnosis-note", action="append", default=[],
                        help="a note under the other slice's diagnosis")
    parser.add_argument("--compare", metavar="FIRST,SECOND", action="append", default=[],
                        help="two arms compared per slice, question by question, in a table on top (repeatable: "
                             "one table each)")
    parser.add_argument("--compare-note", action="append", default=[], metavar="N:TEXT",
                        help="a note under the N-th comparison (from 1)")
    parser.add_argument("--compare-slice", action="append", default=[], type=_slice, metavar="START:N:LABEL",
                        help="another slice of --records as a row of every comparison (repeatable)")
    parser.add_argument("--extra-slice", action="append", default=[], type=_slice, metavar="START:N:LABEL",
                        help="another slice of --records with its own tables, below the main slice's (repeatable)")
    parser.add_argument("--slice-note", action="append", default=[], metavar="START:TEXT",
                        help="a note under the scores of the --extra-slice starting at START")
    parser.add_argument("--slice-diagnosis-note", action="append", default=[], metavar="START:TEXT",
                        help="a note under the diagnosis of the --extra-slice starting at START")
    parser.add_argument("--kept-label", default="",
                        help="a prefix for the captions of the tables --keep-tables keeps (not 'previous run' ones)")
    parser.add_argument("--command", help="the command shown on the page (default: built from the options)")
    parser.add_argument("--out-dir", type=Path, help="where the page data goes (default docs/benchmarks/data)")
    args = parser.parse_args()
    if not 1 <= args.questions <= 100 - args.start or args.start < 0:
        raise SystemExit(f"--start {args.start} --questions {args.questions}: the sample has 100 questions")
    if not (DATA / "musique_train.json").is_file():
        raise SystemExit(f"{DATA}: the MuSiQue sample is missing")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    for pair in args.compare:
        if len(pair.split(",")) != 2 or any(a.strip() not in ARMS for a in pair.split(",")):
            raise SystemExit(f"--compare {pair!r}: two arms, comma-separated, of {sorted(ARMS)}")
    if args.replay:
        records = replay(args, args.replay)
    else:
        records = read_records(args.records) if args.report_only else run(args, arms)
    report(records, args, arms)


if __name__ == "__main__":
    main()
