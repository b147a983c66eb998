"""One ``ctxrag ask`` run in this process with a clock on each stage: where a command's seconds go.

`bench_command_latency.py --ask` starts this script as it starts ``ctxrag ask`` (a fresh process, same environment)
and reads the JSON line it prints last. It runs the real command (``ctxrag.cli.main``'s app, the same chain, the warm
model process when ``llm.warm_idle_s`` > 0) and wraps the stage functions with timers; nothing it measures is
reimplemented here. Stages, in seconds from process start (``time.monotonic`` is one clock for the parent and this
process): imports, knowledge base open, model set-up, retrieval (query embedding included), relevance gate, key terms,
the quote call (its prompt evaluation and decode from llama.cpp's counters, ``response_metadata["timings"]``), the
answer's first token and its end.

    python bench/ask_stages.py "星河知识库的默认端口是多少？" --kb bench
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

T0 = time.monotonic()


def main(argv: list[str]) -> None:
    marks: dict[str, float] = {}
    spans: dict[str, float] = {}
    calls: list[dict[str, Any]] = []

    import ctxrag.cli.main as cli_main
    import ctxrag.cli.query as query
    from langchain_core.callbacks import BaseCallbackHandler

    from ctxrag.chains.evidence import EvidenceCheck
    from ctxrag.chains.key_terms import KeyTerms
    from ctxrag.chains.relevance import RelevanceGate
    from ctxrag.models import chat

    marks["imports"] = time.monotonic()

    def timed(owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*a: Any, **kw: Any) -> Any:
            start = time.monotonic()
            try:
                return inner(*a, **kw)
            finally:
                spans[label] = spans.get(label, 0.0) + time.monotonic() - start

        setattr(owner, name, wrapper)

    timed(query, "open_kbs", "kb open")
    timed(chat, "make_chat_model", "model set-up")
    timed(KeyTerms, "from_knowledge_base", "key terms set-up")
    timed(RelevanceGate, "check", "relevance gate")
    timed(KeyTerms, "coverage", "key terms")
    timed(EvidenceCheck, "ask", "quote call")

    class Clock(BaseCallbackHandler):
        def __init__(self) -> None:
            self.call: dict[str, Any] | None = None
            self.retriever: Any = None

        def on_retriever_start(self, *a: Any, **kw: Any) -> None:
            if self.retriever is None:  # the outermost retriever: the others run inside it
                self.retriever = kw.get("run_id")
                marks["retrieval start"] = time.monotonic()

        def on_retriever_end(self, *a: Any, **kw: Any) -> None:
            if kw.get("run_id") == self.retriever:
                marks["retrieval end"] = time.monotonic()

        def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
            self.call = {"start": time.monotonic() - T0}
            calls.append(self.call)

        def on_llm_new_token(self, token: str, **kw: Any) -> None:
            if self.call is not None and token and "first token" not in self.call:
                self.call["first token"] = time.monotonic() - T0

        def on_llm_end(self, response: Any, **kw: Any) -> None:
            if self.call is None:
                return
            self.call["end"] = time.monotonic() - T0
            for gens in getattr(response, "generations", []):
                for g in gens:
                    message = getattr(g, "message", None)
                    meta = getattr(message, "response_metadata", None) or {}
                    usage = getattr(message, "usage_metadata", None) or {}
                    self.call["timings"] = meta.get("timings") or self.call.get("timings")
                    self.call["prompt_tokens"] = usage.get("input_tokens", self.call.get("prompt_tokens"))

    clock = Clock()
    plain = query.callbacks
    query.callbacks = lambda: [*plain(), clock]
    try:
        cli_main.app(argv, standalone_mode=False)
    finally:
        end = time.monotonic()
        out = {"t0": T0, "imports": marks["imports"] - T0, "end": end - T0, "calls": calls,
               **{k: round(v, 3) for k, v in spans.items()}}
        if "retrieval start" in marks and "retrieval end" in marks:
            out["retrieval"] = round(marks["retrieval end"] - marks["retrieval start"], 3)
        print("\nSTAGES " + json.dumps(out, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
