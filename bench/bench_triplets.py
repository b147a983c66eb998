"""Triplet extraction with the local model, compared with the triplets gpt-3.5-turbo extracted from the same passages.

For the first N passages of the MuSiQue sample (``../shared/data/multihop``, HippoRAG's OpenIE file), the
`TripletExtractor` asks the chat model (the configured default: the embedded 1.5B, or ``CTXRAG_LLM__LOCAL_MODEL=0.5b``)
for triplets, then reports per passage and overall:

- gold entities recovered: the share of the reference's entities (subjects and objects of its triplets) that appear,
  after `entity_key` normalisation, as a subject or object of an extracted triplet;
- grounded triplets: the share of extracted triplets whose subject and object both occur in the passage text
  (normalised), i.e. not invented;
- triplets per passage (model vs reference), seconds per passage.

    python bench/bench_triplets.py --passages 20 [--json bench/out/triplets_1.5b.json]
"""
from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ctxrag.graph import entity_key
from ctxrag.graph.triplets import TripletExtractor
from ctxrag.models.chat import make_chat_model

ROOT = Path(__file__).resolve().parents[1]
OPENIE = ROOT.parent / "shared" / "data" / "multihop" / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"


def gold_triplets(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The reference triplets of one OpenIE record (stored as a Python-literal string), 3-item ones only."""
    raw = doc.get("extracted_triples") or "[]"
    items = ast.literal_eval(raw) if isinstance(raw, str) else raw
    return [tuple(str(x) for x in t) for t in items if isinstance(t, (list, tuple)) and len(t) == 3]  # type: ignore[misc]


def score(passage: str, extracted: list[Any], gold: list[tuple[str, str, str]]) -> dict[str, float | int | None]:
    """Gold-entity recall and groundedness of one passage's extracted triplets."""
    gold_entities = {entity_key(e) for t in gold for e in (t[0], t[2])} - {""}
    got_entities = {entity_key(e) for t in extracted for e in (t.subject, t.object)} - {""}
    text_key = entity_key(passage)
    grounded = [t for t in extracted if entity_key(t.subject) in text_key and entity_key(t.object) in text_key]
    return {
        "gold_entities": len(gold_entities),
        "recovered": len(gold_entities & got_entities),
        "entity_recall": len(gold_entities & got_entities) / len(gold_entities) if gold_entities else None,
        "grounded": len(grounded) / len(extracted) if extracted else None,
        "n_extracted": len(extracted),
        "n_gold": len(gold),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=20, help="first N passages of the OpenIE file (default 20)")
    ap.add_argument("--openie", type=Path, default=OPENIE)
    ap.add_argument("--json", type=Path, default=None, help="write per-passage results here")
    args = ap.parse_args(argv)
    if args.passages < 1:
        ap.error(f"--passages must be at least 1, got {args.passages}")
    if not args.openie.is_file():
        ap.error(f"OpenIE file not found: {args.openie}")
    docs = json.loads(args.openie.read_text(encoding="utf-8"))["docs"][: args.passages]
    llm = make_chat_model()
    extractor = TripletExtractor(llm=llm)
    rows = []
    for doc in tqdm(docs, desc="triplets", unit="passage"):
        passage = doc["passage"]
        start = time.perf_counter()
        extracted = extractor.extract(passage)
        seconds = time.perf_counter() - start
        row = {"title": doc["title"], "seconds": round(seconds, 2), **score(passage, extracted, gold_triplets(doc)),
               "triplets": [list(t) for t in extracted]}
        rows.append(row)
    gold_n = sum(r["gold_entities"] for r in rows)
    recovered = sum(r["recovered"] for r in rows)
    grounded = [r["grounded"] for r in rows if r["grounded"] is not None]
    model = getattr(llm, "model_name", None) or Path(str(getattr(llm, "model_path", "?"))).stem
    print(f"\n{len(rows)} passages, model {model}, parse failures {extractor.failures}")
    print("| model | passages | gold entities recovered | grounded triplets | triplets/passage (model / gpt-3.5) "
          "| s/passage p50 |")
    print("|---|---|---|---|---|---|")
    print(f"| {model} | {len(rows)} | {100 * recovered / max(gold_n, 1):.1f}% ({recovered}/{gold_n}) "
          f"| {100 * statistics.mean(grounded) if grounded else 0:.1f}% "
          f"| {statistics.mean(r['n_extracted'] for r in rows):.1f} / {statistics.mean(r['n_gold'] for r in rows):.1f} "
          f"| {statistics.median(r['seconds'] for r in rows):.1f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"model": model, "rows": rows}, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
