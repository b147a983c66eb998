"""The labelled routing set and its evaluation (fast router) on the session's sample / off-topic knowledge bases."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ctxrag.errors import ConfigError
from ctxrag.evaluation.routing import evaluate_router, format_table, load_routing_set, resolve_selected
from ctxrag.text import detect_language


def test_routing_set_is_large_bilingual_and_covers_every_scenario(sample_kb) -> None:
    items = load_routing_set()
    assert len(items) >= 60
    by_scenario = Counter(i["scenario"] for i in items)
    assert set(by_scenario) == {"1.1", "1.2", "2.1", "2.2", "2.3"} and min(by_scenario.values()) >= 10
    for sc in by_scenario:
        langs = {detect_language(i["question"]) for i in items if i["scenario"] == sc}
        assert langs == {"zh", "en"}, sc
    assert {i["expected"] for i in items if i["scenario"] == "1.2"} == {"rag", "no_knowledge"}
    assert any(i["kb"] == "offtopic" for i in items) and any(i.get("history") for i in items)
    for i in items:  # every selected document exists in the sample corpus
        assert len(resolve_selected(sample_kb, i["selected_docs"])) == len(i["selected_docs"])
        assert bool(i["selected_docs"]) == i["scenario"].startswith("2.")


def test_bad_routing_set_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "set.jsonl"
    p.write_text(json.dumps({"scenario": "1.1", "question": "hi", "expected": "chat"}) + "\n"
                 + json.dumps({"scenario": "3.1", "question": "hi", "expected": "chat"}) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"set.jsonl:2: bad routing item"):
        load_routing_set(p)


def test_fast_router_evaluation_reports_accuracy_per_scenario(sample_kb, offtopic_kb) -> None:
    items = load_routing_set()
    picked = [next(i for i in items if i["scenario"] == sc and i["kb"] == kb)
              for sc, kb in (("1.1", "sample"), ("1.2", "sample"), ("1.2", "offtopic"), ("2.1", "sample"),
                             ("2.2", "sample"), ("2.3", "sample"))]
    report = evaluate_router("fast", picked, {"sample": sample_kb, "offtopic": offtopic_kb})
    assert report["n"] == 6 and set(report["per_scenario"]) == {"1.1", "1.2", "2.1", "2.2", "2.3"}
    assert report["per_scenario"]["1.2"]["n"] == 2
    assert report["accuracy"] == pytest.approx(report["correct"] / 6)
    assert all(r["predicted"] in ("chat", "rag", "no_knowledge", "summary") for r in report["rows"])
    assert report["correct"] >= 5  # the fast router gets these canonical examples right
    table = format_table([report])
    assert "| 2.3 | 1 |" in table and "fast router" in table
