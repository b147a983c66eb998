"""Golden chunks made here: contextualize Anthropic's codebase benchmark with each local strategy, then one retrieval
table (dense / BM25 / hybrid) without contexts, with each local variant and with DeepSeek's contexts.

Resumable: every context goes to a persistent cache (``--out``/contexts.sqlite) the moment it is written, and each
finished document's cost to ``--out``/cost-VARIANT.jsonl, so an interrupted run (Ctrl-C, kill, reboot) continues
where it stopped without asking the model again. A progress bar per variant shows the ETA.

    python bench/bench_golden_chunks.py                                   # all variants, then the table
    python bench/bench_golden_chunks.py --variants document+header@1.5b header --no-eval   # contexts only
    python bench/bench_golden_chunks.py --docs 5 --variants chunk@0.5b    # a quick look at 5 documents
    python bench/bench_golden_chunks.py --dataset drcd                    # Chinese: DRCD articles and paragraphs
    python bench/bench_golden_chunks.py --dataset drcd --eval-docs 100    # the first 100 articles (a partial run)

Variants are ``STRATEGY@MODEL`` (strategy: chunk, document, header, chunk+header, document+header; model: the local
model's name, 1.5b or 0.5b; ``header`` needs none). Columns: Pass@5/10/20 (the cookbook's metric), seconds per chunk
(LLM time / chunks of the documents contextualized in this run), prompt tokens sent, prompt tokens llama.cpp
actually evaluated (the rest was a reused prefix), completion tokens.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ctxrag.indexing import ContextCache
from ctxrag.indexing.contexts.strategies import ContextStrategy, make_contextualizer
from ctxrag.settings import get_settings

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "contextual-retrieval"
MODES = ("dense", "bm25", "hybrid")


@dataclass(frozen=True)
class Variant:
    strategy: ContextStrategy
    model: str | None

    @classmethod
    def parse(cls, text: str) -> Variant:
        strategy, _, model = text.partition("@")
        s = ContextStrategy.from_str(strategy)
        if s is ContextStrategy.NONE:
            raise ValueError("variant 'none' is always in the table (the plain configs); name a strategy")
        if s.uses_llm and not model:
            raise ValueError(f"variant {text!r}: an LLM strategy needs @MODEL (e.g. {s.value}@1.5b)")
        return cls(s, model or None if s.uses_llm else None)

    @property
    def name(self) -> str:
        return f"{self.strategy.value}@{self.model}" if self.model else self.strategy.value

    @property
    def slug(self) -> str:
        return self.name.replace("+", "-").replace("@", "-")


DEFAULT_VARIANTS = ("header", "document@1.5b", "document+header@1.5b", "chunk@0.5b", "chunk@1.5b")
DEFAULT_ZH_VARIANTS = ("header", "document@1.5b", "document+header@1.5b")


@dataclass
class Doc:
    """A benchmark document: its chunks are given (``(chunk id, text)``), as the dataset split them."""

    doc_id: str
    title: str
    content: str
    chunks: list[tuple[str, str]]
    extra: list[dict[str, Any]]
    """Per chunk, fields copied into the contexts file (Anthropic's doc_id/original_index key)."""


def anthropic_docs(data: Path) -> list[Doc]:
    corpus = json.loads((data / "codebase_chunks.json").read_text(encoding="utf-8"))
    return [Doc(d["doc_id"], "", d["content"], [(c["chunk_id"], c["content"]) for c in d["chunks"]],
                [{"doc_id": d["doc_id"], "original_uuid": d["original_uuid"], "original_index": c["original_index"]}
                 for c in d["chunks"]]) for d in corpus]


def drcd_docs(path: Path) -> list[Doc]:
    """DRCD articles as documents, their paragraphs as chunks; chunk ids as `load_dataset("squad", ...)` makes them."""
    data = json.loads(path.read_text(encoding="utf-8-sig"))["data"]
    docs = []
    for ai, art in enumerate(data):
        paras = [(f"0:{ai}:{pi}", p["context"]) for pi, p in enumerate(art["paragraphs"])]
        docs.append(Doc(f"drcd-{ai}", art.get("title", ""), "\n\n".join(t for _, t in paras), paras,
                        [{} for _ in paras]))
    return docs


def chat_model(model: str) -> Any:
    """The local chat model named `model` (1.5b or 0.5b), built the way ingest builds it."""
    from ctxrag.models.chat import make_chat_model

    s = get_settings()
    llm = s.llm.model_copy(update={"local_model": model})
    return make_chat_model(s.model_copy(update={"llm": llm}))


class EvalCounter:
    """Counts the tokens an in-process llama.cpp model evaluates (prompt tokens not served from its prefix cache)."""

    def __init__(self, model: Any) -> None:
        self.tokens = 0
        bound = getattr(model, "bound", model)
        load = getattr(bound, "load", None)
        self.available = callable(load)
        if self.available:
            llama = load().llama
            original = llama.eval

            def counting(tokens: Any) -> Any:
                self.tokens += len(tokens)
                return original(tokens)

            llama.eval = counting


def contextualize(variant: Variant, corpus: list[Doc], out: Path, cache: ContextCache) -> Path:
    """Write ``contexts-SLUG.jsonl`` (chunk_id, context, and DeepSeek's fields) for every chunk; resumable through
    `cache`."""
    target = out / f"contexts-{variant.slug}.jsonl"
    cost_file = out / f"cost-{variant.slug}.jsonl"
    done_docs = set()
    if cost_file.exists():
        done_docs = {json.loads(line)["doc_id"] for line in cost_file.read_text(encoding="utf-8").splitlines() if line}
    model = chat_model(variant.model) if variant.model else None
    ctx = make_contextualizer(variant.strategy, chat_model=model, cache=cache, max_concurrency=1)
    counter = EvalCounter(model) if model is not None else None
    rows = []
    bar = tqdm(corpus, desc=variant.name, unit="doc", total=len(corpus), miniters=1)  # cached documents fly by
    for doc in bar:
        chunks = [text for _, text in doc.chunks]
        before = ctx.report()
        evaluated_before = counter.tokens if counter else 0
        started = time.perf_counter()
        contexts = ctx.contextualize_document(doc.content, chunks, title=doc.title)
        seconds = time.perf_counter() - started
        after = ctx.report()
        if doc.doc_id not in done_docs and after.llm_calls > before.llm_calls:
            cost = {"doc_id": doc.doc_id, "chunks": len(chunks), "seconds": round(seconds, 3),
                    "llm_calls": after.llm_calls - before.llm_calls,
                    "prompt_tokens": after.prompt_tokens - before.prompt_tokens,
                    "completion_tokens": after.completion_tokens - before.completion_tokens,
                    "evaluated_tokens": (counter.tokens - evaluated_before) if counter and counter.available else None}
            with cost_file.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(cost) + "\n")
            done_docs.add(doc.doc_id)
        for (chunk_id, _), extra, context in zip(doc.chunks, doc.extra, contexts):
            rows.append({**extra, "chunk_id": chunk_id, "context": context, "llm": variant.name})
    bar.close()
    tmp = target.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, target)
    return target


def cost_summary(out: Path, variant: Variant) -> dict[str, Any]:
    """s/chunk and token totals over the documents whose contexts were written by the model (not the cache)."""
    path = out / f"cost-{variant.slug}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line] if path.exists() else []
    chunks = sum(r["chunks"] for r in rows)
    evaluated = [r["evaluated_tokens"] for r in rows if r.get("evaluated_tokens") is not None]
    completion = sum(r["completion_tokens"] for r in rows)
    return {
        "docs_timed": len(rows), "chunks_timed": chunks,
        "s_per_chunk": round(sum(r["seconds"] for r in rows) / chunks, 2) if chunks else None,
        "llm_calls": sum(r["llm_calls"] for r in rows),
        "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        # evaluated = every token llama.cpp ran through the model minus the completion's (off by <= 1 per call)
        "evaluated_prompt_tokens": (sum(evaluated) - completion) if len(evaluated) == len(rows) and rows else None,
        "completion_tokens": completion,
    }


def evaluate(fmt: str, data: Path, context_files: dict[str, Path | None], ks: list[int],
             sample: int | None) -> tuple[list[Any], str]:
    """One retrieval table: every mode over every contexts file (None: no contexts)."""
    from ctxrag.evaluation.datasets import load_dataset
    from ctxrag.evaluation.experiments import ExperimentConfig
    from ctxrag.evaluation.report import format_table
    from ctxrag.evaluation.runner import EvalRunner

    kw = {"contexts": None} if fmt == "anthropic" else {}
    dataset = load_dataset(fmt, [data], **kw).sample(sample, 0)
    runner = EvalRunner(dataset, ks, progress=sys.stderr.isatty())
    results = []
    for label, path in context_files.items():
        for mode in MODES:
            name = mode if path is None else f"{mode} [{label}]"
            cfg = ExperimentConfig(name=name, retrieval=mode, contexts_file=path)
            print(f"running {name} ...", file=sys.stderr, flush=True)
            results.extend(runner.run_all([cfg]))
    return results, format_table(results, ks, ())


def anthropic_subset(data: Path, n_docs: int, out: Path) -> Path:
    """A copy of the benchmark restricted to its first `n_docs` documents and the queries whose golden chunks all lie
    in them (for a partial run; the table says so)."""
    corpus = json.loads((data / "codebase_chunks.json").read_text(encoding="utf-8"))[:n_docs]
    uuids = {d["original_uuid"] for d in corpus}
    folder = out / f"subset-{n_docs}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "codebase_chunks.json").write_text(json.dumps(corpus), encoding="utf-8")
    queries = [line for line in (data / "evaluation_set.jsonl").read_text(encoding="utf-8").splitlines()
               if line.strip() and all(g[0] in uuids for g in json.loads(line)["golden_chunk_uuids"])]
    (folder / "evaluation_set.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    ids = {d["doc_id"] for d in corpus}
    for source in sorted(data.glob("contexts*.jsonl")):  # DeepSeek's (or a fixture's) contexts, same documents
        contexts = [line for line in source.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line)["doc_id"] in ids]
        (folder / source.name).write_text("\n".join(contexts) + "\n", encoding="utf-8")
    return folder


def drcd_subset(data: Path, n_docs: int, out: Path) -> Path:
    """DRCD restricted to its first `n_docs` articles (paragraph ids unchanged), for a partial run; the table says so."""
    raw = json.loads(data.read_text(encoding="utf-8-sig"))
    path = out / f"subset-{n_docs}.json"
    path.write_text(json.dumps({**raw, "data": raw["data"][:n_docs]}, ensure_ascii=False), encoding="utf-8")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=("anthropic", "drcd"), default="anthropic",
                        help="anthropic: the 90 code documents (Pass@5/10/20 over 248 queries); drcd: DRCD dev, "
                             "articles as documents, paragraphs as chunks (Recall@1, MRR@10 over 500 questions)")
    parser.add_argument("--data", type=Path, default=None, help="the dataset folder (anthropic) or DRCD_dev.json")
    parser.add_argument("--variants", nargs="+", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--docs", type=int, default=None, help="only the first N documents (a quick look)")
    parser.add_argument("--no-eval", action="store_true", help="write contexts only")
    parser.add_argument("--sample", type=int, default=None, help="questions scored (drcd default 500, seed 0)")
    parser.add_argument("--eval-docs", type=int, default=None,
                        help="contextualize and score only the first N documents (drcd: articles) and the queries "
                             "whose golden chunks all lie in them (a partial run; say so next to its numbers)")
    args = parser.parse_args()
    anthropic = args.dataset == "anthropic"
    data = args.data or (DATA if anthropic else ROOT.parent / "shared" / "data" / "chinese" / "DRCD_dev.json")
    if not (data / "codebase_chunks.json" if anthropic else data).is_file():
        print(f"benchmark data not found at {data}", file=sys.stderr)
        return 2
    try:
        variants = [Variant.parse(v) for v in (args.variants or (DEFAULT_VARIANTS if anthropic else DEFAULT_ZH_VARIANTS))]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)
    out = args.out or ROOT / "bench" / "out" / f"golden-{args.dataset}"
    out.mkdir(parents=True, exist_ok=True)
    corpus = (anthropic_docs(data) if anthropic else drcd_docs(data))[: args.eval_docs or args.docs]
    print(f"{len(corpus)} documents, {sum(len(d.chunks) for d in corpus)} chunks; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at start", file=sys.stderr)
    files: dict[str, Path | None] = {"no contexts": None}
    costs: dict[str, dict[str, Any]] = {}
    with ContextCache(out / "contexts.sqlite") as cache:
        for v in variants:
            files[v.name] = contextualize(v, corpus, out, cache)
            costs[v.name] = cost_summary(out, v)
    if args.eval_docs:
        data = (anthropic_subset if anthropic else drcd_subset)(data, args.eval_docs, out)
    if anthropic:
        files["deepseek"] = data / "contexts_deepseek_extracted.jsonl"
    print("\ncost of the local variants (documents contextualized by the model, not the cache):")
    print("| variant | docs | chunks | s/chunk | LLM calls | prompt tokens sent | prompt tokens evaluated | completion tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for name, c in costs.items():
        print(f"| {name} | {c['docs_timed']} | {c['chunks_timed']} | {c['s_per_chunk']} | {c['llm_calls']} | "
              f"{c['prompt_tokens']} | {c['evaluated_prompt_tokens']} | {c['completion_tokens']} |")
    (out / "costs.json").write_text(json.dumps(costs, indent=1), encoding="utf-8")
    if args.no_eval or (args.docs and not args.eval_docs):
        return 0
    ks = [5, 10, 20] if anthropic else [1, 5, 10]
    _, table = evaluate("anthropic" if anthropic else "squad", data, files, ks,
                        args.sample if args.sample or anthropic else 500)
    print()
    print(table)
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
