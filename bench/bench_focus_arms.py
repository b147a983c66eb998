"""Answer focus before and after on the answers and citations pages: runs that answered the same questions with whole
chunks (``answer_focus_chars`` 0) and with each chunk cut to its sentences near the question (``--focus``), in one
run; one table added to each page's JSON, replacing the table of the same caption and keeping the page's others.

    ctxrag eval answers --format keyfacts examples/sample_corpus --questions examples/sample_questions.json \\
        --kb eval-demo --no-judge --focus 0 --focus 300 --json demo.json
    ctxrag eval answers --format squad ../shared/data/chinese/DRCD_dev.json --config hybrid -k 1 --sample 200 \\
        --seed 0 --limit 24 --answer-style short --max-tokens 48 --no-judge --no-stock --focus 0 --focus 300 \\
        --json drcd.json
    python bench/bench_focus_arms.py answers --run "demo key facts" demo.json "CMD" "LOAD" \\
        --run "DRCD seed 0, first 24" drcd.json "CMD" "LOAD"
    python bench/bench_citations.py generate --sets demo,own --focus 0,300 --out DEMO
    python bench/bench_citations.py generate --sets drcd --drcd 40 --focus 0,300 --out DRCD
    python bench/bench_focus_arms.py citations --run "demo and own" DEMO "CMD" "LOAD" --run "DRCD" DRCD "CMD" "LOAD"

``LOAD`` is the 1-minute load average at the run's start and end as its log recorded it; ``CMD`` the command shown
under the table. The focused arm is compared with the whole-chunk arm question by question; on the citations page
only questions answered in both arms count (a run stopped early keeps its arms paired, `bench_citations.py`
answers each question in every arm in turn).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pagedata import DATA_DIR, Table, _portable  # noqa: E402

from bench_citations import _checked, _gold, demo_correct, drcd_scores, states_reference  # noqa: E402

CAPTION = "Answer focus: whole chunks and focus 300, both in the same run"
ANSWER_COLUMNS = ["set (questions)", "chunks given to the model", "k", "EM", "F1", "cited ⊇ answer",
                  "key facts right", "abstained", "answers that differ from whole chunks", "s/answer p50",
                  "load (1 min) start → end"]
CITATION_COLUMNS = ["set (questions)", "chunks given to the model", "cited correctly (demo or own questions)",
                    "DRCD precision %", "DRCD precision %, answers stating a reference", "DRCD recall %",
                    "DRCD answers citing / with a gold chunk", "DRCD answers stating a reference", "abstained",
                    "answers that differ from whole chunks", "s/answer p50", "load (1 min) start → end"]


def arm_label(focus: int) -> str:
    """The row label of a focus arm: ``before: whole chunks`` for 0, ``after: focus N`` otherwise."""
    return "before: whole chunks" if focus == 0 else f"after: focus {focus}"


def _pct(m: dict[str, Any], key: str) -> float | None:
    return round(100 * m[key], 1) if key in m else None


def answer_rows(label: str, doc: dict[str, Any], load: str) -> list[list[Any]]:
    """The whole-chunk row and each focused row of one `ctxrag eval answers --focus 0 --focus N` run."""
    arms = {r["focus"]: r for r in doc["results"] if r.get("focus") is not None}
    if 0 not in arms or len(arms) < 2:
        raise SystemExit(f"{label}: the run answered with focus {sorted(arms)}: it needs 0 and another")
    whole = {q["id"]: q["answer"] for q in arms[0]["per_query"]}
    out = []
    for focus in sorted(arms):
        r = arms[focus]
        m, per = r["metrics"], r["per_query"]
        facts = f"{int(m['answers_right'])}/{r['queries']}" if "answers_right" in m else None
        differ = sum(whole.get(q["id"]) != q["answer"] for q in per)
        out.append([f"{label} ({r['queries']})", arm_label(focus), doc.get("k"), _pct(m, "em"), _pct(m, "f1"),
                    _pct(m, "cited_contains"), facts, sum(q.get("supported") is False for q in per),
                    differ if focus else None, round(m["s_per_answer_p50"], 1), load])
    return out


def paired(records: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Records per focus arm, keeping only questions answered in every arm (in the first arm's order)."""
    arms: dict[int, dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("focus") is None:
            raise SystemExit(f"record without a focus arm ({r['question'][:40]!r}): generate with --focus 0,N")
        arms.setdefault(int(r["focus"]), {})[r["question"]] = r
    if 0 not in arms or len(arms) < 2:
        raise SystemExit(f"the answers have focus arms {sorted(arms)}: they need 0 and another")
    both = [q for q in arms[0] if all(q in a for a in arms.values())]
    return {focus: [a[q] for q in both] for focus, a in sorted(arms.items())}


def citation_rows(label: str, records: list[dict[str, Any]], load: str) -> list[list[Any]]:
    """Per focus arm: the citation check's scores (as the page's "after the citation check" row) on the questions
    answered in every arm."""
    arms = paired(records)
    whole = {r["question"]: r["answer"] for r in arms[0]}
    out = []
    for focus, recs in arms.items():
        corpus = [r for r in recs if r["set"] in ("demo", "own")]
        drcd = [r for r in recs if r["set"] == "drcd"]
        d = drcd_scores(drcd, _checked) if drcd else None
        cited = f"{sum(demo_correct(r, _checked(r)) for r in corpus)}/{len(corpus)}" if corpus else None
        # precision over answers stating a reference: none when no citing answer states one (not 0 %)
        right = any(states_reference(r) and _checked(r) and _gold(r) for r in drcd)
        differ = sum(whole[r["question"]] != r["answer"] for r in recs)
        out.append([f"{label} ({len(recs)})", arm_label(focus), cited,
                    round(100 * d["precision"], 1) if d else None,
                    round(100 * d["precision_right"], 1) if d and right else None,
                    round(100 * d["recall"], 1) if d else None, f"{d['answers']}/{d['with_gold']}" if d else None,
                    sum(states_reference(r) for r in drcd) if drcd else None,
                    sum(r.get("supported") is False for r in recs), differ if focus else None,
                    round(statistics.median(r["seconds"] for r in recs), 1), load])
    return out


def add_table(page: str, table: Table, out_dir: Path) -> Path:
    """Put ``table`` on the page's JSON in place of the table of the same caption (the others kept)."""
    path = out_dir / f"{page}.json"
    data = json.loads(path.read_text("utf-8"))
    data["tables"] = [*(t for t in data["tables"] if t.get("caption") != table.caption), _portable(asdict(table))]
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page", choices=["answers", "citations"])
    ap.add_argument("--run", nargs=4, action="append", required=True, metavar=("LABEL", "JSON", "CMD", "LOAD"))
    ap.add_argument("--note", action="append", default=[], help="a note under the table (repeatable)")
    ap.add_argument("--out-dir", type=Path, default=DATA_DIR)
    args = ap.parse_args()
    rows: list[list[Any]] = []
    commands = []
    for label, path, cmd, load in args.run:
        doc = json.loads(Path(path).read_text("utf-8"))
        rows += answer_rows(label, doc, load) if args.page == "answers" else citation_rows(label, doc, load)
        commands.append(f"{label}: `{cmd}`")
    columns = ANSWER_COLUMNS if args.page == "answers" else CITATION_COLUMNS
    table = Table(caption=CAPTION, columns=columns, rows=rows, notes=[*commands, *args.note])
    print(f"wrote {add_table(args.page, table, args.out_dir)}")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
