"""The `graph` configuration: a `GraphIndex` over the dataset's passages with provided OpenIE triplets
(``--format musique``: HippoRAG's ``openie_*.json``), queried by `GraphRetriever` (Personalized PageRank ranking),
dense retrieval giving passage seeds and filling up.

Passages are matched to the triplet file by their text (``title + "\\n" + text``, the HippoRAG ``passage`` field);
a dataset without a triplets file is refused with a clear error (extracting triplets with the small local LLM over a
whole benchmark corpus is not something to start by accident).
"""
from __future__ import annotations

from typing import Any

from langchain_core.retrievers import BaseRetriever

from ctxrag.errors import ConfigError


def build_graph_retriever(runner: Any, variant: Any, k: int) -> BaseRetriever:
    """GraphRetriever over ``runner.dataset`` (needs ``dataset.extra["openie_file"]``), dense retrieval as fallback."""
    from ctxrag.stores.graph import GraphIndex
    from ctxrag.graph.triplets import load_openie_file
    from ctxrag.retrievers.graph import PPR_PASSAGE_SEEDS, GraphRetriever
    from ctxrag.evaluation.runner import IndexRetriever

    ds = runner.dataset
    path = ds.extra.get("openie_file")
    if not path:
        raise ConfigError(f"config 'graph' needs triplets for dataset {ds.name!r}: use --format musique with the "
                          "HippoRAG openie_*.json file in the folder")
    by_text: dict[str, list[Any]] = {}
    for passage, triplets in load_openie_file(path):
        by_text.setdefault(passage.strip(), []).extend(triplets)
    items = [(cid, variant.texts[cid], by_text.get(item.text.strip(), [])) for cid, item in ds.corpus.items()]
    graph = GraphIndex(runner.embeddings, show_progress=runner.progress)
    graph.add_passages(items)
    dense = runner._dense(variant)
    fallback = IndexRetriever(search=lambda q, kk: dense.search(runner._query_vector(q), kk), texts=variant.texts,
                              k=max(k, PPR_PASSAGE_SEEDS), score_key="dense_score", name="dense")
    # PageRank ranking, the best measured without an LLM (docs/graph_rag.md); dense's top passages seed the walk
    return GraphRetriever(graph_index=graph, embeddings=runner.embeddings, k=k, rerank="ppr",
                          fallback_retriever=fallback)
