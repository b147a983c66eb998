"""Prefix reuse when golden-chunk contexts are written through an OpenAI-compatible server.

Starts a real ``python -m llama_cpp.server`` on 127.0.0.1 with the local GGUF, writes Anthropic's per-chunk contexts
(`Contextualizer`, the prefix-heavy strategy: every request repeats its document) for the first documents of the code
benchmark through ``ChatOpenAI``, and reads from the server's own log how many prompt tokens of each request were
served from its prefix cache (llama.cpp's "N prefix-match hit, remaining M prompt tokens to eval"). The peer, in the
same run: the same documents through the in-process model (llama.cpp's evaluated tokens counted directly). Both start
with an empty context cache.

    python bench/bench_context_server.py                      # first 2 documents, the 1.5B model
    python bench/bench_context_server.py --docs 4 --model 0.5b --concurrency 1
    python bench/bench_context_server.py --no-peer            # the server only

Columns: chunks, LLM calls, prompt tokens sent (as the server reports them), tokens evaluated, share reused
(1 - evaluated / sent), s/chunk. The llama-cpp-python server has one slot (requests queue); llama.cpp's own
``llama-server`` with parallel slots keeps one cache per slot, so each slot evaluates a document once.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_golden_chunks import DATA, EvalCounter, anthropic_docs, chat_model
from ctxrag.indexing import ContextCache, Contextualizer
from ctxrag.models import gguf
from ctxrag.settings import get_settings

from ctxrag.testing.llm_server import SERVER_MODEL_ALIAS, run_llama_server  # the tests' real-server helper

HIT = re.compile(r"(\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")


def run(ctx: Contextualizer, docs: list[Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    for doc in docs:
        ctx.contextualize_document(doc.content, [text for _, text in doc.chunks], title=doc.title)
    return time.perf_counter() - started, ctx.report()


def row(name: str, seconds: float, report: Any, evaluated: int | None) -> dict[str, Any]:
    sent = report.prompt_tokens
    return {"run": name, "chunks": report.chunks, "llm_calls": report.llm_calls, "prompt_tokens_sent": sent,
            "prompt_tokens_evaluated": evaluated,
            "reused_share": round(1 - evaluated / sent, 3) if evaluated is not None and sent else None,
            "completion_tokens": report.completion_tokens, "fallbacks": report.fallbacks,
            "s_per_chunk": round(seconds / report.chunks, 2) if report.chunks else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--docs", type=int, default=2, help="the first N documents of the benchmark")
    parser.add_argument("--model", default="1.5b", help="local model: 1.5b or 0.5b")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight per document (after the first)")
    parser.add_argument("--no-peer", action="store_true", help="skip the in-process run")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here too")
    args = parser.parse_args()
    if not (args.data / "codebase_chunks.json").is_file():
        print(f"benchmark data not found at {args.data}", file=sys.stderr)
        return 2
    docs = anthropic_docs(args.data)[: args.docs]
    settings = get_settings()
    n_ctx, threads = settings.llm.n_ctx, settings.llm.n_threads
    path = gguf.local_model_path(settings, spec=gguf.model_spec(args.model))
    print(f"{len(docs)} documents, {sum(len(d.chunks) for d in docs)} chunks; model {args.model}, n_ctx {n_ctx}, "
          f"threads {threads or 'default'}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start",
          file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with run_llama_server(path, n_ctx=n_ctx, n_threads=threads, startup_timeout=180, log_path=log) as url:
            from ctxrag.models.chat import make_chat_model

            llm = settings.llm.model_copy(update={"provider": "openai", "base_url": url, "model": SERVER_MODEL_ALIAS,
                                                  "max_retries": 0, "timeout": 600})
            model = make_chat_model(settings.model_copy(update={"llm": llm}))
            with ContextCache(Path(tmp) / "server.sqlite") as cache:
                ctx = Contextualizer(model, settings=settings, cache=cache, max_concurrency=args.concurrency,
                                     n_ctx=n_ctx, model_name=f"server-{args.model}")
                seconds, report = run(ctx, docs)
        text = log.read_text(encoding="utf-8", errors="replace")
        reused = sum(int(m.group(1)) for m in HIT.finditer(text))
        rows.append(row(f"llama_cpp.server, concurrency {args.concurrency}", seconds, report,
                        report.prompt_tokens - reused))
        if not args.no_peer:
            model = chat_model(args.model)
            counter = EvalCounter(model)  # loads the model, outside the timed run
            with ContextCache(Path(tmp) / "inprocess.sqlite") as cache:
                ctx = Contextualizer(model, settings=settings, cache=cache, max_concurrency=1, n_ctx=n_ctx,
                                     model_name=f"inprocess-{args.model}")
                counter.tokens = 0
                seconds, report = run(ctx, docs)
            rows.append(row("in-process llama.cpp (peer)", seconds, report,
                            counter.tokens - report.completion_tokens if counter.available else None))
    print("| run | chunks | LLM calls | prompt tokens sent | evaluated | reused | completion tokens | fallbacks | s/chunk |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        share = f"{100 * r['reused_share']:.1f}%" if r["reused_share"] is not None else "n/a"
        print(f"| {r['run']} | {r['chunks']} | {r['llm_calls']} | {r['prompt_tokens_sent']:,} | "
              f"{r['prompt_tokens_evaluated']:,} | {share} | {r['completion_tokens']:,} | {r['fallbacks']} | "
              f"{r['s_per_chunk']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
