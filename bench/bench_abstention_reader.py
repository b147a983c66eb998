"""The SQuAD-2.0 style reader decision on the abstention benchmark: the short-answer reader as an answerability test.

    python bench/bench_abstention.py retrieve --records R0 --zh 90 --en 20 --cross 10 --seed 0 --home H0
    python bench/bench_abstention.py reader --records R0 --home H0 --seed 0 --reader-out P0 --reader-tokens 24
    python bench/bench_abstention_reader.py --records R0 --home H0 --reader P0 [--records2 R1 --home2 H1 --reader2 P1]

`bench_abstention.py reader` asks the local model, for each question the gate passes (round-robin over the groups,
so a run stopped early covers each group evenly), the short-answer reader's prompt (`ExtractiveAnswer`'s) with a
no-answer option (reply ``无法回答`` / ``NOT FOUND``), greedily, and records the phrase, its log-probability, whether
it snaps to a retrieved chunk's span (`chains.extractive.snap`), and the log-probability of the no-answer reply under
that prompt and under the product's prompt (no option). The decisions measured here (no model call):

- (a) snapped: the phrase is a span of a retrieved chunk (and not the no-answer reply);
- (b1) the greedy phrase is not the no-answer reply;
- (b2) the null score: log P(no answer) - log P(the greedy phrase) at most a threshold (SQuAD 2.0's rule);
- (b3) log P(no answer) under the product's prompt (no option offered) at most a threshold;

on top of the gate and the key-term stage (`ctxrag.chains.key_terms`, the product's 0.25: `reader --reader-key 0.25`
asks the questions that stage passes first; a reader line of a question it stops counts as that stage's abstention,
so the reader alone is measured only where lines exist for the questions the key terms stop). Thresholds are
chosen on the calibration half (every other question of each group) at the most abstention within a false-abstention
criterion; the held-out half reports. ``same-language questions asking for a short answer only``: the reader test applies
only to questions in their chunks' language that ask for a short answer (decided by the question's words,
`asks_short_answer`), the others pass it. The tables are written into
``docs/benchmarks/data/abstention.json`` beside the other ones (replacing this script's earlier tables).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_abstention as ab  # noqa: E402
from pagedata import DATA_DIR, Table  # noqa: E402

CAPTION = "Reader decision"
ONLY = " (same-language questions asking for a short answer only)"
NOT_MEASURED = ("the SQuAD-2.0 null score (`ExtractiveAnswer`'s span against a no-answer option) was not measured in "
                "this run.")
MEASURED = ("the SQuAD-2.0 reader decision (`ExtractiveAnswer`'s phrase snapped to a span, and its score against a "
            "no-answer reply) is measured on a sub-sample of the retrieval-only records in the 'Reader decision' "
            "tables (`bench_abstention_reader.py`).")
PRODUCT_KEY = 0.25
CRITERIA = (0.05, 0.10)
NULL_SCORES = (-8.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0)
NULL_PRODUCT = (-20.0, -16.0, -14.0, -12.0, -10.0, -8.0, -6.0)
LONG_ANSWER = re.compile(
    r"^\s*(how (does|do|is|are|can|should|would)|why|explain|describe|what happens|what (does|do|is the (purpose|role|"
    r"difference|relationship|process|approach))|in what way)\b|為什麼|为什么|如何|怎麼|怎么|怎樣|怎样|什麼作用|什么作用",
    re.IGNORECASE)


def asks_short_answer(question: str) -> bool:
    """Whether ``question`` asks for a short answer (a name, number, date, term) rather than a description ("how
    does ... work", "what does ... do", "why", 為什麼, 如何): decided by the question's words alone.

    >>> asks_short_answer("楊浦區有幾所高校？"), asks_short_answer("How does the function handle errors?")
    (True, False)
    """
    return not LONG_ANSWER.search(question)


@dataclass(frozen=True)
class Arm:
    """A decision after the gate: key terms (None: off), then one reader test (or none)."""

    key: float | None = None
    test: str = "none"  # none, snapped, not-null, null-score, null-product
    threshold: float = 0.0
    short_only: bool = False

    def describe(self) -> str:
        parts = ["key terms " + ("off" if self.key is None else str(self.key))]
        if self.test in ("null-score", "null-product"):
            parts.append(f"{self.test} <= {self.threshold}")
        elif self.test != "none":
            parts.append(self.test)
        if self.short_only and self.test != "none":
            parts.append("same-language short-answer questions only")
        return ", ".join(parts)


def _is_null(phrase: str) -> bool:
    text = phrase.strip().strip("。.!！").upper()
    return any(n.upper() in text for n in ab.NULL_ANSWER.values())


def answers(r: dict[str, Any], arm: Arm) -> bool:
    """Whether the chain answers ``r`` (a question the gate passed, with its reader line) under ``arm``."""
    if arm.key is not None and r["key"] is not None and r["key"] < arm.key:
        return False
    if arm.test == "none" or (arm.short_only and (r["cross"] or not asks_short_answer(r["question"]))):
        return True
    rd = r["reader"]
    if arm.test == "snapped":
        return rd["snap"] is not None and not _is_null(rd["phrase"])
    if arm.test == "not-null":
        return not _is_null(rd["phrase"])
    if arm.test == "null-score":
        return not _is_null(rd["phrase"]) and rd["null_b"] - rd["lp"] <= arm.threshold
    if arm.test == "null-product":
        return rd["null_a"] <= arm.threshold
    raise ValueError(f"unknown test {arm.test!r}")


def grids() -> dict[str, list[Arm]]:
    out: dict[str, list[Arm]] = {}
    for base, keys in (("gate + key terms", (PRODUCT_KEY,)),):
        out[f"{base}"] = [Arm(k) for k in keys]
        out[f"{base} + (a) snapped"] = [Arm(k, "snapped") for k in keys]
        out[f"{base} + (a) snapped{ONLY}"] = [Arm(k, "snapped", short_only=True) for k in keys]
        out[f"{base} + (b1) no-answer reply"] = [Arm(k, "not-null") for k in keys]
        out[f"{base} + (b1) no-answer reply{ONLY}"] = [Arm(k, "not-null", short_only=True) for k in keys]
        out[f"{base} + (b2) null score"] = [Arm(k, "null-score", t) for k in keys for t in NULL_SCORES]
        out[f"{base} + (b2) null score{ONLY}"] = [Arm(k, "null-score", t, True) for k in keys for t in NULL_SCORES]
        out[f"{base} + (b3) P(no answer), product prompt"] = [Arm(k, "null-product", t) for k in keys
                                                              for t in NULL_PRODUCT]
    return out


def choose(cal: list[dict[str, Any]], grid: list[Arm], max_false: float) -> Arm:
    """The arm with the most abstention on ``cal`` at <= ``max_false`` false abstention; none there: the least false
    abstention (ties: the first in grid order)."""
    best: tuple[tuple[bool, float, float], Arm] | None = None
    for arm in grid:
        a, f = ab._rates(cal, lambda r, arm=arm: answers(r, arm))
        ok = f <= max_false + 1e-9
        key = (ok, a if ok else -f, -f)
        if best is None or key > best[0]:
            best = (key, arm)
    assert best is not None
    return best[1]


def load(records: Path, home: Path, seed: int, reader: Path) -> list[dict[str, Any]]:
    """One split's records that have a reader line (each has passed the gate), the line as ``rec["reader"]``."""
    lines = {}
    for line in reader.read_text(encoding="utf-8").splitlines():
        if line:
            row = json.loads(line)
            lines[row["id"]] = row
    from ctxrag.chains.relevance import is_cross_language

    recs = ab._split(records, home, seed, ab.MAX_QUOTE_CHARS)
    out = []
    for r in recs:
        if r["id"] in lines:
            r["reader"] = lines[r["id"]]
            r["cross"] = is_cross_language(r["question"], ab._docs(r))
            out.append(r)
    return out


def _cases(r: dict[str, Any]) -> str:
    if r["kb"] == "demo" or "other language" in r["case"]:
        return "demo corpus and other-language general questions"
    return ab._group(r)


def tables(recs: list[dict[str, Any]]) -> tuple[list[Table], dict[tuple[str, float], Arm]]:
    cal = [r for r in recs if r["calibration"]]
    held = [r for r in recs if not r["calibration"]]
    splits = list(dict.fromkeys(r["split"] for r in recs))
    picks: dict[tuple[str, float], Arm] = {}
    rule_rows = []
    for crit in CRITERIA:
        for name, grid in grids().items():
            arm = picks[(name, crit)] = choose(cal, grid, crit)
            (ca, cf), (ha, hf) = (ab._rates(p, lambda r, arm=arm: answers(r, arm)) for p in (cal, held))
            per = [ab._rates([r for r in held if r["split"] == s], lambda r, arm=arm: answers(r, arm))
                   for s in splits]
            rule_rows.append([f"{100 * crit:.0f}%", name, arm.describe(), round(100 * ca, 1), round(100 * cf, 1),
                              round(100 * ha, 1), round(100 * hf, 1),
                              "; ".join(f"seed {s}: {100 * a:.1f} / {100 * f:.1f}" for s, (a, f) in zip(splits, per))])
    shown = ["gate + key terms", "gate + key terms + (a) snapped",
             "gate + key terms + (b1) no-answer reply", "gate + key terms + (b2) null score",
             f"gate + key terms + (b2) null score{ONLY}"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in held:
        groups.setdefault(_cases(r), []).append(r)
    group_rows = []
    for g, sel in groups.items():
        measure = "false abstention %" if ab._answerable(sel[0]) else "abstention %"
        group_rows.append([g, len(sel), measure, *(
            round(100 * sum(not answers(r, picks[(s, 0.10)]) for r in sel) / len(sel), 1) for s in shown)])
    case_rows = []
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        by_case.setdefault(_cases(r), []).append(r)
    for g, sel in by_case.items():
        null = [r for r in sel if _is_null(r["reader"]["phrase"])]
        snapped = [r for r in sel if r not in null and r["reader"]["snap"] is not None]
        scores = sorted(r["reader"]["null_b"] - r["reader"]["lp"] for r in sel if r not in null)
        case_rows.append([g, len(sel), len(null), len(snapped), len(sel) - len(null) - len(snapped),
                          ", ".join(f"{x:.2f}" for x in scores)])
    line_rows = []
    for r in sorted(recs, key=lambda r: (r["split"], not r["calibration"], _cases(r))):
        rd = r["reader"]
        line_rows.append([r["split"], "calibration" if r["calibration"] else "held out", _cases(r),
                          r["question"][:60], "yes" if r["key"] is None or r["key"] >= PRODUCT_KEY else "no",
                          "yes" if asks_short_answer(r["question"]) else "no", rd["phrase"][:40],
                          "no" if rd["snap"] is None else f"yes ({rd['snap']})", round(rd["null_b"] - rd["lp"], 2),
                          round(rd["null_a"], 2)])
    return [
        Table(caption=f"{CAPTION}, each question: the reader's greedy phrase (prompt with the no-answer option), "
                      "whether it snaps to a retrieved span (overlap F1), the null score log P(no answer) - log "
                      "P(phrase) under that prompt, and log P(no answer) under the product's prompt",
              columns=["split (seed)", "half", "questions", "question", f"key terms >= {PRODUCT_KEY}",
                       "asks a short answer", "phrase", "snapped", "null score", "log P(no answer), product prompt"],
              rows=line_rows),
        Table(caption=f"{CAPTION} by question group, both halves: how often the reader (prompt with the no-answer "
                      "option) gives the no-answer reply, a phrase that snaps to a retrieved span, or one that does "
                      "not",
              columns=["questions", "n", "no-answer reply", "phrase snapped", "phrase not snapped",
                       "null scores of the phrases"], rows=case_rows),
        Table(caption=f"{CAPTION} (SQuAD 2.0 style): the short-answer reader's phrase and no-answer score on top of "
                      "the gate and the key terms (0.25), on questions both pass (thresholds chosen "
                      "on the calibration half at the most abstention within each false-abstention criterion; % "
                      "abstention / % false abstention)",
              columns=["criterion (calibration false abstention at most)", "rule", "thresholds",
                       "calibration abstention %", "calibration false abstention %", "held-out abstention %",
                       "held-out false abstention %", "held out by split (abstention % / false abstention %)"],
              rows=rule_rows),
        Table(caption=f"{CAPTION} by question group, held out, questions the gate and the key terms pass, the rules chosen at the "
                      "10% criterion",
              columns=["questions", "n", "measure", *(f"{s} ({picks[(s, 0.10)].describe()})" for s in shown)],
              rows=group_rows),
    ], picks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=Path, required=True, help="the first split's `retrieve` records")
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reader", type=Path, required=True, help="the first split's `reader` lines")
    ap.add_argument("--records2", type=Path, default=None, help="the second split's `retrieve` records")
    ap.add_argument("--home2", type=Path, default=None)
    ap.add_argument("--seed2", type=int, default=1)
    ap.add_argument("--reader2", type=Path, default=None)
    ap.add_argument("--run-note", default="", help="how the reader lines were collected (load, time, n)")
    ap.add_argument("--out-dir", type=Path, default=DATA_DIR)
    ap.add_argument("--dry-run", action="store_true", help="print the tables, do not write the page data")
    args = ap.parse_args()
    recs = load(args.records, args.home, args.seed, args.reader)
    if args.records2 and args.reader2 and args.reader2.exists():
        recs += load(args.records2, args.home2, args.seed2, args.reader2)
    new_tables, picks = tables(recs)
    for t in new_tables:
        print(t.caption)
        for row in t.rows:
            print("  ", row)
    if args.dry_run:
        return
    new_tables = [new_tables[1], new_tables[2], new_tables[3], new_tables[0]]
    n_cal = sum(r["calibration"] for r in recs)
    secs = sorted(r["reader"]["s"] for r in recs)
    new_tables[0].notes = [
        f"Questions: {len(recs)} the gate passes ({n_cal} calibration / {len(recs) - n_cal} held out), taken "
        "round-robin over the question groups (each group's first, then each group's second, ...) until the run was "
        f"stopped; median {secs[len(secs) // 2]:.0f} s per question with the local 1.5B in process, one thread. "
        f"{args.run_note}",
        "Reader lines: `python bench/bench_abstention.py reader --records R0 --home H0 --seed 0 --reader-out P0 "
        "--reader-tokens 24 --reader-key 0.25` (R0: the retrieval-only records of the model-free tables; the "
        "questions the key terms pass at 0.25 first); this table: `python "
        "bench/bench_abstention_reader.py --records R0 --home H0 --reader P0`"
        + (" with the second split's --records2 R1 --home2 H1 --reader2 P1" if args.reader2 else "") + ".",
    ]
    path = args.out_dir / "abstention.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["tables"] = [t for t in data["tables"] if not str(t.get("caption", "")).startswith(CAPTION)]
    data["tables"] += [asdict(t) for t in new_tables]
    # the model-based report's note (`bench_abstention.py report`) as it reads since this measurement
    data["notes"] = [n.replace(NOT_MEASURED, MEASURED) for n in data.get("notes", [])]
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({f"{n} @ {c}": a.describe() for (n, c), a in picks.items()}, ensure_ascii=False, indent=1))
    print(f"load {os.getloadavg()[0]:.1f}, {time.strftime('%H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    main()
