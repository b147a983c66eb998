"""Context strategies: document-level contexts (one call per document), the header, their combination, the factory,
and the golden-chunks benchmark resuming without asking again (in process, and as a real process killed mid-run)."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr

from ctxrag.indexing import ContextCache, Contextualizer
from ctxrag.indexing.contexts.document_context import DocumentContextualizer
from ctxrag.indexing.contexts.strategies import (
    ContextStrategy,
    HeaderContextualizer,
    HeaderedContextualizer,
    LanguageContextualizer,
    make_contextualizer,
)
from ctxrag.indexing.contexts.report import ContextReport
from ctxrag.testing.llm_server import HANG_GUARD_S

DOC = (
    "ACME Corp annual report 2023.\n"
    "Revenue: the company's revenue grew 3% over the previous quarter.\n"
    "Costs: operating costs fell by 2% thanks to a new supplier."
)
CHUNKS = ["Revenue: the company's revenue grew 3% over the previous quarter.",
          "Costs: operating costs fell by 2% thanks to a new supplier."]
HEADINGS = ["Report > Revenue", "Report > Costs"]


class CountingChat(BaseChatModel):
    """Answers `answer`, records prompts; raises `boom` on the call number `fail_on` (1-based) when set."""

    model_name: str = "counting-model"
    answer: str = "ACME Corp annual report 2023: revenue growth and falling costs."
    prompts: list[str] = Field(default_factory=list)
    fail_on: int | None = None
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "counting"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        with self._lock:
            self.prompts.append(str(messages[-1].content))
            if self.fail_on is not None and len(self.prompts) == self.fail_on:
                raise KeyboardInterrupt("interrupted by the test")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.answer))])


@pytest.fixture
def cache(tmp_path: Path) -> ContextCache:
    with ContextCache(tmp_path / "contexts.sqlite") as c:
        yield c


def test_strategy_from_str_and_properties() -> None:
    assert ContextStrategy.from_str(" Document+Header ") is ContextStrategy.DOCUMENT_HEADER
    assert ContextStrategy.from_str(ContextStrategy.CHUNK) is ContextStrategy.CHUNK
    assert not ContextStrategy.HEADER.uses_llm and ContextStrategy.DOCUMENT.uses_llm
    assert ContextStrategy.CHUNK_HEADER.with_header and not ContextStrategy.CHUNK.with_header
    with pytest.raises(ValueError, match="'per-page'"):
        ContextStrategy.from_str("per-page")


def test_document_context_is_one_call_for_all_chunks_and_cached(cache: ContextCache) -> None:
    llm = CountingChat()
    ctx = DocumentContextualizer(llm, cache=cache)
    contexts = ctx.contextualize_document(DOC, CHUNKS, title="report.md")
    assert contexts == [llm.answer, llm.answer]
    assert len(llm.prompts) == 1
    assert "<document>\nACME Corp annual report 2023." in llm.prompts[0] and "2-3 sentences" in llm.prompts[0]
    report = ctx.report()
    assert (report.documents, report.chunks, report.llm_calls, report.contextualized) == (1, 2, 1, 1)
    again = DocumentContextualizer(llm, cache=cache)
    assert again.contextualize_document(DOC, CHUNKS, title="report.md") == contexts
    assert len(llm.prompts) == 1  # from the cache
    assert again.report().cache_hits == 2


def test_document_context_chinese_prompt_and_empty_chunks(cache: ContextCache) -> None:
    llm = CountingChat(answer="华为2023年年报：营收与成本。")
    ctx = DocumentContextualizer(llm, cache=cache)
    assert ctx.contextualize_document("华为公司2023年年报。营收增长了3%。成本下降了2%。", []) == []
    assert llm.prompts == []
    ctx.contextualize_document("华为公司2023年年报。营收增长了3%。成本下降了2%。", ["营收增长了3%。"])
    assert "请为这篇文档写一段简短的上下文" in llm.prompts[0]


def test_document_context_long_document_is_cut_to_its_beginning(cache: ContextCache) -> None:
    llm = CountingChat()
    doc = "START of the document.\n" + "filler words here. " * 4000 + "\nEND of the document."
    ctx = DocumentContextualizer(llm, cache=cache, n_ctx=1024)
    ctx.contextualize_document(doc, ["filler words here."])
    assert "START of the document." in llm.prompts[0] and "END of the document." not in llm.prompts[0]
    assert ctx.report().windowed == 1


def test_document_context_falls_back_to_the_title(cache: ContextCache, ctxrag_home: Path) -> None:
    from ctxrag.settings import LLMSettings, Settings

    s = Settings(llm=LLMSettings(provider="none"))
    ctx = DocumentContextualizer(settings=s, cache=cache)
    assert ctx.contextualize_document(DOC, CHUNKS, title="report.md") == ["report.md", "report.md"]
    assert ctx.report().fallbacks == 1


def test_header_contextualizer() -> None:
    ctx = HeaderContextualizer()
    assert ctx.contextualize_document(DOC, CHUNKS, title="report.md", heading_paths=HEADINGS) == [
        "report.md > Report > Revenue", "report.md > Report > Costs"]
    assert ctx.contextualize_document(DOC, ["x"]) == [""]
    assert ctx.report().chunks == 3
    with pytest.raises(ValueError, match="heading_paths has 1 entries for 2 chunks"):
        ctx.contextualize_document(DOC, CHUNKS, heading_paths=["a"])


def test_headered_puts_the_header_line_first_and_never_twice(cache: ContextCache) -> None:
    llm = CountingChat()
    ctx = HeaderedContextualizer(DocumentContextualizer(llm, cache=cache))
    out = ctx.contextualize_document(DOC, CHUNKS, title="report.md", heading_paths=HEADINGS)
    assert out == [f"report.md > Report > Revenue\n{llm.answer}", f"report.md > Report > Costs\n{llm.answer}"]
    assert HeaderedContextualizer.combine("a > b", "a") == "a > b"  # the inner fell back to the title
    assert HeaderedContextualizer.combine("a > b", "a > b\nctx") == "a > b\nctx"
    assert HeaderedContextualizer.combine("", "ctx") == "ctx"
    assert ctx.report().llm_calls == 1 and ctx.cache is cache


@pytest.mark.parametrize("name, kind", [
    ("none", type(None)), ("header", HeaderContextualizer), ("chunk", Contextualizer),
    ("document", DocumentContextualizer), ("chunk+header", HeaderedContextualizer),
    ("document+header", HeaderedContextualizer), ("auto", LanguageContextualizer),
])
def test_factory_builds_each_strategy(name: str, kind: type, cache: ContextCache) -> None:
    ctx = make_contextualizer(name, chat_model=CountingChat(), cache=cache)
    assert isinstance(ctx, kind)
    if ctx is not None:
        out = ctx.contextualize_document(DOC, CHUNKS, title="report.md", heading_paths=HEADINGS)
        assert len(out) == 2 and all(isinstance(c, str) for c in out)


ZH_DOC = "玉山位於臺灣中部，主峰海拔3952公尺，是東北亞第一高峰。"


def test_auto_gives_chinese_documents_the_header_and_others_the_document_context(cache: ContextCache) -> None:
    llm = CountingChat()
    built: list[str] = []

    def other() -> DocumentContextualizer:
        built.append("document")
        return DocumentContextualizer(llm, cache=cache)

    ctx = LanguageContextualizer(chinese=HeaderContextualizer, other=other)
    assert ctx.contextualize_document(ZH_DOC, [ZH_DOC], title="玉山", heading_paths=["地理"]) == ["玉山 > 地理"]
    assert built == [] and llm.prompts == []  # a Chinese document never builds (or loads) the LLM side
    assert ctx.contextualize_document(DOC, CHUNKS, title="report.md") == [llm.answer, llm.answer]
    assert ctx.contextualize_document(DOC + " More.", CHUNKS, title="report.md") == [llm.answer, llm.answer]
    assert built == ["document"] and len(llm.prompts) == 2  # built once, then reused
    report = ctx.report()
    assert (report.documents, report.chunks, report.llm_calls, report.fallbacks) == (3, 5, 2, 1), report
    assert report.fallback_reason == "strategy 'header' (no LLM)" and report.usage == "estimated"
    forced = LanguageContextualizer(chinese=HeaderContextualizer, other=other, language="zh")
    assert forced.contextualize_document(DOC, CHUNKS, title="report.md") == ["report.md", "report.md"]
    assert len(llm.prompts) == 2
    with pytest.raises(ValueError, match="language='fr'"):
        LanguageContextualizer(chinese=HeaderContextualizer, other=other, language="fr")  # type: ignore[arg-type]


def test_auto_follows_the_language_setting(cache: ContextCache) -> None:
    from ctxrag.settings import Settings

    llm = CountingChat()
    ctx = make_contextualizer("auto", chat_model=llm, settings=Settings(language="en"), cache=cache)
    assert ctx.contextualize_document(ZH_DOC, [ZH_DOC], title="玉山") == [llm.answer]  # forced to the LLM side
    assert len(llm.prompts) == 1 and "请为这篇文档写一段简短的上下文" in llm.prompts[0]


def test_context_report_total() -> None:
    total = ContextReport.total([
        ContextReport(documents=1, chunks=2, llm_calls=1, seconds=0.25, usage="reported", fallback_reason="a"),
        ContextReport(documents=2, chunks=3, fallbacks=3, seconds=0.5, usage="estimated", fallback_reason="b"),
        ContextReport(chunks=1, fallback_reason="a"),
    ])
    assert (total.documents, total.chunks, total.llm_calls, total.fallbacks, total.seconds) == (3, 6, 1, 3, 0.75)
    assert total.usage == "mixed" and total.fallback_reason == "a; b"
    assert ContextReport.total([]) == ContextReport()


def test_kb_ingest_with_document_strategy_indexes_the_context(ctxrag_home: Path, tmp_path: Path) -> None:
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import EmbeddingSettings, Settings

    s = Settings(embeddings=EmbeddingSettings(provider="fake"))
    doc = tmp_path / "pumps.md"
    doc.write_text("# Pumps\n\nThe P-200 moves 40 litres a minute.\n\n# Warranty\n\nTwo years on every part.\n",
                   encoding="utf-8")
    llm = CountingChat(answer="Acme garden pump manual: models, flow rates and warranty.")
    with KnowledgeBase.open("strat", s) as kb:
        kb.ingest([doc], contextualizer=make_contextualizer("document+header", chat_model=llm, settings=s),
                  progress=False)
        hits = kb.search("garden pump manual", k=5, mode="bm25")
    assert len(llm.prompts) == 1
    assert hits and all("Acme garden pump manual" in h.metadata["context"] for h in hits)
    first_lines = {h.metadata["context"].split("\n")[0] for h in hits}
    assert first_lines == {"Pumps > Pumps", "Pumps > Warranty"}, first_lines  # the header line comes first


def _load_bench() -> Any:
    path = Path(__file__).resolve().parents[3] / "bench" / "bench_golden_chunks.py"
    spec = importlib.util.spec_from_file_location("bench_golden_chunks", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["bench_golden_chunks"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_interrupted_benchmark_resumes_without_asking_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _load_bench()
    corpus = [
        bench.Doc(f"doc_{d}", f"title {d}", f"document {d} " + " ".join(f"part {i}." for i in range(3)),
                  [(f"doc_{d}_chunk_{i}", f"part {i} of document {d}.") for i in range(3)],
                  [{"doc_id": f"doc_{d}", "original_index": i} for i in range(3)])
        for d in range(4)
    ]
    llm = CountingChat(fail_on=7)  # 3 chunk calls per document: dies on the third document's first chunk
    monkeypatch.setattr(bench, "chat_model", lambda name: llm)
    variant = bench.Variant.parse("chunk@test")
    out = tmp_path / "out"
    out.mkdir()
    with ContextCache(out / "contexts.sqlite") as cache:
        with pytest.raises(KeyboardInterrupt):
            bench.contextualize(variant, corpus, out, cache)
    assert len(llm.prompts) == 7
    llm.fail_on = None
    with ContextCache(out / "contexts.sqlite") as cache:
        target = bench.contextualize(variant, corpus, out, cache)
    assert len(llm.prompts) == 7 + 6  # the 6 cached chunks were not asked again; the other 6 were
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 12 and all(r["context"] == llm.answer for r in rows)
    assert {r["doc_id"] for r in rows} == {f"doc_{d}" for d in range(4)}
    assert rows[0]["chunk_id"] == "doc_0_chunk_0" and rows[0]["original_index"] == 0
    cost = bench.cost_summary(out, variant)
    assert cost["docs_timed"] == 4 and cost["chunks_timed"] == 12 and cost["llm_calls"] == 12
    with pytest.raises(ValueError, match="needs @MODEL"):
        bench.Variant.parse("document")
    assert bench.Variant.parse("header").model is None


PUMPS = ["Falcon", "Heron", "Osprey", "Kestrel", "Plover", "Curlew"]


def _tiny_code_benchmark(folder: Path) -> int:
    """Six short documents of two chunks each in the benchmark's layout (written for this test); returns their count."""
    docs = []
    for i, name in enumerate(PUMPS):
        chunks = [f"The {name}-{i} pump moves {10 * (i + 1)} litres per minute at {i + 1} bar.",
                  f"The {name}-{i} pump was designed in workshop {i} and weighs {3 + i} kg."]
        docs.append({"doc_id": f"doc_{i}", "original_uuid": f"uuid-{i}", "content": "\n".join(chunks),
                     "chunks": [{"chunk_id": f"doc_{i}_chunk_{j}", "original_index": j, "content": c}
                                for j, c in enumerate(chunks)]})
    folder.mkdir()
    (folder / "codebase_chunks.json").write_text(json.dumps(docs), encoding="utf-8")
    return len(docs)


@pytest.mark.llm
@pytest.mark.slow
def test_killed_benchmark_process_resumes_without_asking_the_model_again(tmp_path: Path, llm_endpoint_env: Any) -> None:
    """The benchmark as a real process, writing per-document contexts through the real model behind a real
    OpenAI-compatible server: SIGKILLed after two documents, then run again; only the unfinished documents are asked."""
    n_docs = _tiny_code_benchmark(tmp_path / "data")
    out = tmp_path / "out"
    bench = Path(__file__).resolve().parents[3] / "bench" / "bench_golden_chunks.py"
    cmd = [sys.executable, str(bench), "--data", str(tmp_path / "data"), "--variants", "document@1.5b",
           "--no-eval", "--out", str(out)]
    cost_file = out / "cost-document-1.5b.jsonl"
    llm_endpoint_env.hold_after(2)  # the third document's call waits, however fast (replayed) the replies come
    first = subprocess.Popen(cmd, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + HANG_GUARD_S
    while not (cost_file.exists() and len(cost_file.read_text(encoding="utf-8").splitlines()) >= 2
               and llm_endpoint_env.count > 2):
        assert first.poll() is None, first.stderr.read().decode()[-2000:] if first.stderr else first.returncode
        assert time.monotonic() < deadline, "the benchmark wrote no two documents before the hang guard"
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    llm_endpoint_env.release()
    asked_first = llm_endpoint_env.count
    timed_first = len(cost_file.read_text(encoding="utf-8").splitlines())
    with ContextCache(out / "contexts.sqlite") as cache:
        cached = len(cache)  # one per finished document (a per-document context is cached under the document)
    assert cached == 2, (cached, asked_first)  # the third call was held: exactly two documents finished
    assert not (out / "contexts-document-1.5b.jsonl").exists()  # killed before the end: no output file yet
    llm_endpoint_env.reset()
    second = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert second.returncode == 0, second.stderr[-2000:]
    assert llm_endpoint_env.count == n_docs - cached, (llm_endpoint_env.count, cached)  # cached ones not asked
    written = (out / "contexts-document-1.5b.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in written.splitlines()]
    assert len(rows) == 2 * n_docs and [r["chunk_id"] for r in rows][:2] == ["doc_0_chunk_0", "doc_0_chunk_1"]
    by_doc: dict[str, set[str]] = {}
    for r in rows:
        by_doc.setdefault(r["doc_id"], set()).add(r["context"])
    assert all(len(contexts) == 1 for contexts in by_doc.values()), by_doc  # one document context per document
    for i, name in enumerate(PUMPS):  # each document's own summary, written by the model (not a title fallback)
        assert name in by_doc[f"doc_{i}"].pop(), (name, rows)
    costs = [json.loads(line) for line in cost_file.read_text(encoding="utf-8").splitlines()]
    ids = [c["doc_id"] for c in costs]
    assert len(ids) == len(set(ids)) == timed_first + n_docs - cached, (ids, timed_first)  # each timed once


def test_drcd_documents_match_the_squad_loader_ids() -> None:
    bench = _load_bench()
    from ctxrag.evaluation.datasets import load_squad

    squad = Path(__file__).resolve().parents[2] / "evaluation" / "fixtures" / "squad_zh.json"
    docs = bench.drcd_docs(squad)
    corpus = load_squad([squad]).corpus
    assert {cid for d in docs for cid, _ in d.chunks} == set(corpus)
    for d in docs:
        for cid, text in d.chunks:
            assert corpus[cid].text == text and text in d.content


def test_anthropic_subset_keeps_queries_inside_the_first_documents(tmp_path: Path) -> None:
    bench = _load_bench()
    data = Path(__file__).resolve().parents[2] / "evaluation" / "fixtures" / "anthropic_tiny"
    corpus = json.loads((data / "codebase_chunks.json").read_text(encoding="utf-8"))
    folder = bench.anthropic_subset(data, 1, tmp_path)
    kept = {corpus[0]["original_uuid"]}
    queries = [json.loads(x) for x in (folder / "evaluation_set.jsonl").read_text(encoding="utf-8").splitlines() if x]
    all_q = [json.loads(x) for x in (data / "evaluation_set.jsonl").read_text(encoding="utf-8").splitlines() if x]
    assert queries == [q for q in all_q if all(g[0] in kept for g in q["golden_chunk_uuids"])]
    assert [d["doc_id"] for d in json.loads((folder / "codebase_chunks.json").read_text(encoding="utf-8"))] == [
        corpus[0]["doc_id"]]


def test_drcd_subset_keeps_the_first_articles_and_their_ids(tmp_path: Path) -> None:
    bench = _load_bench()
    from ctxrag.evaluation.datasets import load_squad

    squad = Path(__file__).resolve().parents[2] / "evaluation" / "fixtures" / "squad_zh.json"
    whole = load_squad([squad])
    part = load_squad([bench.drcd_subset(squad, 1, tmp_path)])
    first = {cid for cid, _ in bench.drcd_docs(squad)[0].chunks}
    assert set(part.corpus) == first and first < set(whole.corpus)  # ids unchanged, later articles gone
    assert {q.gold_ids[0] for q in part.queries} <= first and len(part.queries) < len(whole.queries)
