"""The `graph` configuration: a `GraphIndex` over the dataset's passages with provided OpenIE triplets
(``--format musique``: HippoRAG's ``openie_*.json``), queried by `GraphRetriever` (Personalized PageRank ranking),
dense retrieval giving passage seeds and filling up.

Passages are matched to the triplet file by their text (``title + "\\n" + text``, the HippoRAG ``passage`` field);
a dataset without a triplets file is refused with a clear error (extracting triplets with the small local LLM over a
whole benchmark corpus is not something to start by accident).
"""
from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever

from ctxrag.errors import ConfigError
from ctxrag.evaluation.datasets import EvalDataset
from ctxrag.stores.graph import GraphIndex
from ctxrag.graph.triplets import load_openie_file
from ctxrag.retrievers.graph import GraphRetriever


def build_graph_retriever(dataset: EvalDataset, texts: dict[str, str], embeddings: Embeddings, k: int,
                          fallback: BaseRetriever, *, progress: bool = False) -> BaseRetriever:
    """GraphRetriever over `dataset` (needs ``dataset.extra["openie_file"]``) indexing `texts`; `fallback` (dense,
    at least `PPR_PASSAGE_SEEDS` deep) seeds the PageRank walk and fills up."""
    path = dataset.extra.get("openie_file")
    if not path:
        raise ConfigError(f"config 'graph' needs triplets for dataset {dataset.name!r}: use --format musique with the "
                          "HippoRAG openie_*.json file in the folder")
    by_text: dict[str, list[Any]] = {}
    for passage, triplets in load_openie_file(path):
        by_text.setdefault(passage.strip(), []).extend(triplets)
    items = [(cid, texts[cid], by_text.get(item.text.strip(), [])) for cid, item in dataset.corpus.items()]
    graph = GraphIndex(embeddings, show_progress=progress)
    graph.add_passages(items)
    # PageRank ranking, the best measured without an LLM (docs/graph_rag.md); dense's top passages seed the walk
    return GraphRetriever(graph_index=graph, embeddings=embeddings, k=k, rerank="ppr", fallback_retriever=fallback)
