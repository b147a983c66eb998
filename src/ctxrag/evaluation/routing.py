"""Routing evaluation: accuracy of the fast and LLM routers per scenario on the labelled routing set.

The set (``ctxrag/resources/routing/routing_set.jsonl``) has one question per line with its scenario (1.1, 1.2, 2.1,
2.2, 2.3), the expected route, the selected documents (sample-corpus file names) and the knowledge base it is asked
against: ``sample`` (``examples/sample_corpus``) or ``offtopic`` (a small baking / gardening / running corpus shipped
next to the set), plus an optional history for follow-ups.

Example::

    from ctxrag.evaluation.routing import load_routing_set, build_routing_kbs, evaluate_router
    items = load_routing_set()
    kbs = build_routing_kbs("examples/sample_corpus")
    report = evaluate_router("fast", items, kbs)
    report["per_scenario"]   # {"1.1": {"n": 15, "correct": 14, "accuracy": 0.93}, ...}
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tqdm.auto import tqdm

from ctxrag.chains.rewrite import QuestionRewriter
from ctxrag.chains.router import SCENARIOS, Route, Router, make_router
from ctxrag.errors import ConfigError, DocumentNotFound
from ctxrag.kb import open_kb
from ctxrag.resource_paths import default_routing_set, offtopic_corpus

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel

    from ctxrag.kb import KnowledgeBaseProtocol
    from ctxrag.settings import Settings

KB_NAMES = {"sample": "routing-sample", "offtopic": "routing-offtopic"}


def load_routing_set(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The labelled items; raises ConfigError naming the line of a malformed one."""
    p = Path(path) if path else default_routing_set()
    if not p.is_file():
        raise ConfigError(f"routing set {p} does not exist")
    items = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            Route.from_str(item["expected"])
            if item["scenario"] not in SCENARIOS or not isinstance(item["question"], str):
                raise ValueError(f"unknown scenario {item['scenario']!r}")
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{p}:{n}: bad routing item ({e})") from None
        items.append(item)
    return items


def build_routing_kbs(corpus: str | Path, settings: Settings | None = None) -> dict[str, KnowledgeBaseProtocol]:
    """Open (and ingest, skipping unchanged files) the two knowledge bases the set refers to."""
    corpus = Path(corpus)
    if not corpus.is_dir():
        raise ConfigError(f"sample corpus folder {corpus} does not exist (run from the repository root or pass --corpus)")
    kbs = {}
    for key, folder in (("sample", corpus), ("offtopic", offtopic_corpus())):
        kb = open_kb(KB_NAMES[key], settings)
        report = kb.ingest([folder], contextualize=False, progress=False)  # as measured: no contexts
        if report.failed:
            raise ConfigError(f"ingesting {folder} failed: {[(f.path, f.reason) for f in report.failed]}")
        kbs[key] = kb
    return kbs


def resolve_selected(kb: KnowledgeBaseProtocol, names: list[str]) -> list[str]:
    ids = []
    for name in names:
        try:
            ids.append(kb.get_document(name).doc_id)
        except DocumentNotFound:
            raise ConfigError(f"selected document {name!r} is not in knowledge base {kb.name!r}") from None
    return ids


def evaluate_router(kind: str, items: list[dict[str, Any]], kbs: dict[str, KnowledgeBaseProtocol],
                    llm: BaseChatModel | None = None, *, progress: bool = False,
                    router_factory: Callable[..., Router] | None = None) -> dict[str, Any]:
    """Route every item with router `kind` ('fast' or 'llm'); follow-ups are rewritten first when `llm` is given."""
    factory = router_factory or make_router
    routers = {}
    for key, kb in kbs.items():
        cat = kb.catalog()
        cat.refresh()
        routers[key] = factory(kind, kb, llm, catalog=cat)
    rewriter = QuestionRewriter(llm if kind == "llm" else None)
    rows = []
    t0 = time.perf_counter()
    for item in tqdm(items, desc=f"routing ({kind})", unit="q", disable=not progress):
        kb = kbs[item.get("kb", "sample")]
        selected = resolve_selected(kb, item.get("selected_docs") or [])
        history = item.get("history")
        question = rewriter.rewrite(item["question"], history)
        start = time.perf_counter()
        d = routers[item.get("kb", "sample")].route(question, selected or None, history)
        rows.append({"id": item["id"], "scenario": item["scenario"], "question": item["question"],
                     "standalone": question, "expected": item["expected"], "predicted": d.route.value,
                     "correct": d.route.value == item["expected"], "fallback": d.fallback,
                     "router_used": d.router_used, "seconds": round(time.perf_counter() - start, 3),
                     "signals": {k: round(v, 4) for k, v in d.signals.items()}})
    return summarise(kind, rows, time.perf_counter() - t0)


def summarise(kind: str, rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    per: dict[str, dict[str, Any]] = defaultdict(lambda: {"n": 0, "correct": 0})
    for r in rows:
        per[r["scenario"]]["n"] += 1
        per[r["scenario"]]["correct"] += int(r["correct"])
    for v in per.values():
        v["accuracy"] = v["correct"] / v["n"] if v["n"] else 0.0
    total = sum(int(r["correct"]) for r in rows)
    return {"router": kind, "n": len(rows), "correct": total, "accuracy": total / len(rows) if rows else 0.0,
            "per_scenario": dict(sorted(per.items())), "fallbacks": sum(int(r["fallback"]) for r in rows),
            "seconds": round(seconds, 2), "mean_seconds": round(seconds / len(rows), 3) if rows else 0.0, "rows": rows}


def format_table(reports: list[dict[str, Any]]) -> str:
    """One row per scenario, one accuracy column per router."""
    head = "| scenario | n | " + " | ".join(f"{r['router']} router" for r in reports) + " |"
    sep = "|---|---|" + "---|" * len(reports)
    lines = [head, sep]
    for sc in SCENARIOS:
        cells = []
        n = 0
        for r in reports:
            v = r["per_scenario"].get(sc)
            n = v["n"] if v else n
            cells.append(f"{v['accuracy']:.2f} ({v['correct']}/{v['n']})" if v else "-")
        lines.append(f"| {sc} | {n} | " + " | ".join(cells) + " |")
    lines.append("| all | " + str(reports[0]["n"] if reports else 0) + " | "
                 + " | ".join(f"{r['accuracy']:.2f} ({r['correct']}/{r['n']})" for r in reports) + " |")
    lines.append("| s/question | | " + " | ".join(f"{r['mean_seconds']:.3f}" for r in reports) + " |")
    lines.append("| llm fallbacks | | " + " | ".join(str(r["fallbacks"]) for r in reports) + " |")
    return "\n".join(lines)
