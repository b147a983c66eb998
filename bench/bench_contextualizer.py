"""Time the local model contextualizing whole documents of Anthropic's codebase benchmark.

Runs the default chat model (settings: in-process llama.cpp GGUF unless CTXRAG_LLM__* say otherwise) through
`Contextualizer` on two documents of ``../shared/data/contextual-retrieval/codebase_chunks.json``, cold (empty cache),
then again (the peer: the same documents from the context cache), and prints seconds per chunk, prompt and completion
tokens, and example contexts next to DeepSeek's from ``contexts_deepseek_extracted.jsonl``.

    python bench/bench_contextualizer.py                    # doc_62 and doc_3
    python bench/bench_contextualizer.py --docs doc_4 doc_27 --max-tokens 80
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from ctxrag.indexing import ContextCache, Contextualizer, load_precomputed_contexts
from ctxrag.settings import get_settings

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "contextual-retrieval"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", nargs="+", default=["doc_62", "doc_3"], help="doc_id values of codebase_chunks.json")
    parser.add_argument("--max-tokens", type=int, default=100, help="completion limit per context")
    parser.add_argument("--examples", type=int, default=3)
    args = parser.parse_args()
    if not (DATA / "codebase_chunks.json").is_file():
        print(f"benchmark data not found under {DATA}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)
    corpus = {d["doc_id"]: d for d in json.loads((DATA / "codebase_chunks.json").read_text(encoding="utf-8"))}
    missing = [d for d in args.docs if d not in corpus]
    if missing:
        print(f"unknown doc ids {missing}", file=sys.stderr)
        return 2
    deepseek = load_precomputed_contexts(DATA / "contexts_deepseek_extracted.jsonl", key=("doc_id", "original_index"))
    settings = get_settings()
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"model: provider={settings.llm.provider} n_ctx={settings.llm.n_ctx} max_tokens={args.max_tokens}; "
          f"{os.cpu_count()} cores, load average {load_avg:.1f} at start")

    with tempfile.TemporaryDirectory() as tmp, ContextCache(Path(tmp) / "contexts.sqlite") as cache:
        ctx = Contextualizer(settings=settings, cache=cache, max_tokens=args.max_tokens, show_progress=True)
        started = time.perf_counter()
        model = ctx.writer.model()  # load outside the timed loop; reported separately
        load = getattr(getattr(model, "bound", model), "load", None)
        if callable(load):  # the in-process GGUF loads lazily otherwise, inside the first chunk's time
            load()
        load_s = time.perf_counter() - started
        rows, produced = [], {}
        for doc_id in args.docs:
            doc = corpus[doc_id]
            chunks = [c["content"] for c in doc["chunks"]]
            before = ctx.report()
            t0 = time.perf_counter()
            contexts = ctx.contextualize_document(doc["content"], chunks, title=doc_id)
            seconds = time.perf_counter() - t0
            after = ctx.report()
            produced[doc_id] = contexts
            rows.append((
                "local cold", doc_id, len(doc["content"]), len(chunks), seconds, seconds / len(chunks),
                after.prompt_tokens - before.prompt_tokens, after.completion_tokens - before.completion_tokens,
                after.fallbacks - before.fallbacks, after.windowed - before.windowed,
            ))  # fmt: skip
        cold = ctx.report()
        ctx.reset_stats()
        for doc_id in args.docs:  # peer: the same documents again, all from the cache
            doc = corpus[doc_id]
            chunks = [c["content"] for c in doc["chunks"]]
            t0 = time.perf_counter()
            assert ctx.contextualize_document(doc["content"], chunks, title=doc_id) == produced[doc_id]
            seconds = time.perf_counter() - t0
            rows.append(("cached (peer)", doc_id, len(doc["content"]), len(chunks), seconds, seconds / len(chunks), 0, 0, 0, 0))
        warm = ctx.report()

    print(f"\nmodel load: {load_s:.1f} s (not in the timings below)")
    header = f"{'run':<14} {'doc':<7} {'chars':>6} {'chunks':>6} {'s':>7} {'s/chunk':>8} {'prompt tok':>10} {'compl tok':>9} {'fallb':>5} {'wind':>4}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r[0]:<14} {r[1]:<7} {r[2]:>6} {r[3]:>6} {r[4]:>7.2f} {r[5]:>8.3f} {r[6]:>10} {r[7]:>9} {r[8]:>5} {r[9]:>4}")
    n = cold.chunks
    print(f"\ncold total: {n} chunks, {cold.seconds:.1f} s, {cold.seconds / max(n, 1):.2f} s/chunk, "
          f"{cold.prompt_tokens} prompt + {cold.completion_tokens} completion tokens ({cold.usage}), "
          f"{cold.completion_tokens / max(cold.seconds, 1e-9):.1f} completion tok/s overall")  # fmt: skip
    print(f"load average at end: {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "")
    print(f"cached total: {warm.chunks} chunks, {warm.cache_hits} cache hits, {warm.llm_calls} LLM calls, {warm.seconds:.3f} s")

    print("\nexamples (local model vs deepseek-chat):")
    shown = 0
    for doc_id in args.docs:
        for i, context in enumerate(produced[doc_id]):
            if shown >= args.examples:
                break
            if i % 2:  # spread the examples over the document
                continue
            print(f"\n[{doc_id} chunk {i}]")
            print(textwrap.fill("local:    " + context, 116, subsequent_indent="          "))
            print(textwrap.fill("deepseek: " + deepseek.get(f"{doc_id}_{i}", "(none)"), 116, subsequent_indent="          "))
            shown += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
