"""The answer pages' evidence check, plain vs the product's, from `ctxrag eval answers` runs that answered the same
questions with both (``--evidence plain --evidence default``): one table added to a page's JSON (``answers`` by
default), replacing the table of the same caption and keeping the page's other tables.

    ctxrag eval answers --format keyfacts examples/sample_corpus --questions examples/sample_questions.json \\
        --kb eval-demo --no-judge --evidence plain --evidence default --json demo.json
    ctxrag eval answers --format squad ../shared/data/chinese/DRCD_dev.json --config hybrid -k 1 --sample 200 \\
        --seed 0 --limit 40 --answer-style short --max-tokens 48 --no-judge --no-stock \\
        --evidence plain --evidence default --json drcd.json
    python bench/bench_evidence_arms.py --run "demo key facts" demo.json "CMD" "LOAD" \\
        --run "DRCD seed 0, first 40" drcd.json "CMD" "LOAD"

``LOAD`` is the 1-minute load average at the run's start and end as the run's log recorded it; ``CMD`` the command
shown under the table. A run's ``default`` arm is compared with its ``plain`` arm question by question.
``--replayed LABEL=ARM`` marks an arm whose model replies came from a reply cache filled earlier (the same requests:
greedy decoding gives the same reply), so its seconds are not shown.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pagedata import DATA_DIR, Table, _portable  # noqa: E402

CAPTION = "The evidence check: the product's (default) and the plain one, both in the same run"
COLUMNS = ["set (questions)", "evidence check", "k", "EM", "F1", "key facts right", "abstained",
           "answers that differ from plain", "s/answer p50", "load (1 min) start → end"]


def _arms(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    arms = {r.get("evidence"): r for r in doc["results"] if r.get("evidence")}
    if not {"plain", "default"} <= set(arms):
        raise SystemExit(f"the run answered with {sorted(a for a in arms if a)}: it needs plain and default")
    return arms


def _pct(m: dict[str, Any], key: str) -> float | None:
    return round(100 * m[key], 1) if key in m else None


def rows(label: str, doc: dict[str, Any], load: str, replayed: set[str] = frozenset()) -> list[list[Any]]:
    """The run's plain and default rows; the arms in ``replayed`` without their seconds."""
    arms = _arms(doc)
    plain = {q["id"]: q["answer"] for q in arms["plain"]["per_query"]}
    out = []
    for name in ("plain", "default"):
        r = arms[name]
        m, per = r["metrics"], r["per_query"]
        facts = f"{int(m['answers_right'])}/{r['queries']}" if "answers_right" in m else None
        abstained = sum(q.get("supported") is False for q in per)
        differ = sum(plain.get(q["id"]) != q["answer"] for q in per)
        out.append([f"{label} ({r['queries']})", name, doc.get("k"), _pct(m, "em"), _pct(m, "f1"), facts,
                    abstained, differ if name != "plain" else None,
                    "replayed" if name in replayed else round(m["s_per_answer_p50"], 1), load])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", nargs=4, action="append", required=True, metavar=("LABEL", "JSON", "CMD", "LOAD"))
    ap.add_argument("--replayed", action="append", default=[], metavar="LABEL=ARM",
                    help="an arm answered from a filled reply cache (repeatable)")
    ap.add_argument("--page", default="answers")
    ap.add_argument("--note", action="append", default=[], help="a note under the table (repeatable)")
    ap.add_argument("--out-dir", type=Path, default=DATA_DIR)
    args = ap.parse_args()
    table_rows: list[list[Any]] = []
    commands = []
    for label, path, cmd, load in args.run:
        replayed = {r.split("=", 1)[1] for r in args.replayed if r.split("=", 1)[0] == label}
        table_rows += rows(label, json.loads(Path(path).read_text("utf-8")), load, replayed)
        commands.append(f"{label}: `{cmd}`")
    table = Table(caption=CAPTION, columns=COLUMNS, rows=table_rows, notes=[*commands, *args.note])
    page = args.out_dir / f"{args.page}.json"
    data = json.loads(page.read_text("utf-8"))
    tables = [t for t in data["tables"] if t.get("caption") != CAPTION]
    data["tables"] = [*tables, _portable(asdict(table))]
    page.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
