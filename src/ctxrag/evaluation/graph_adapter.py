"""The `graph` configuration's index: a `GraphIndex` over the dataset's passages with provided OpenIE triplets
(``--format musique``: HippoRAG's ``openie_*.json``). The retriever over it is the product's own
(`ctxrag.retrievers.factory.make_retriever` with ``mode="graph"``: Personalized PageRank ranking by default, dense
retrieval giving passage seeds and filling up).

Passages are matched to the triplet file by their text (``title + "\\n" + text``, the HippoRAG ``passage`` field);
a dataset without a triplets file is refused with a clear error (extracting triplets with the small local LLM over a
whole benchmark corpus is not something to start by accident).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.embeddings import Embeddings

from ctxrag.errors import ConfigError
from ctxrag.evaluation.datasets import EvalDataset
from ctxrag.graph.triplets import load_openie_file
from ctxrag.stores.graph import GraphIndex


def graph_index_builder(dataset: EvalDataset, texts: dict[str, str], *,
                        progress: bool = False) -> Callable[[Embeddings], GraphIndex]:
    """A function building the `GraphIndex` over `dataset` (needs ``dataset.extra["openie_file"]``) indexing `texts`
    with an embedding model; the dataset is checked now, the index built when called."""
    path = dataset.extra.get("openie_file")
    if not path:
        raise ConfigError(f"config 'graph' needs triplets for dataset {dataset.name!r}: use --format musique with the "
                          "HippoRAG openie_*.json file in the folder")

    def build(embeddings: Embeddings) -> GraphIndex:
        by_text: dict[str, list[Any]] = {}
        for passage, triplets in load_openie_file(path):
            by_text.setdefault(passage.strip(), []).extend(triplets)
        items = [(cid, texts[cid], by_text.get(item.text.strip(), [])) for cid, item in dataset.corpus.items()]
        graph = GraphIndex(embeddings, show_progress=progress)
        graph.add_passages(items)
        return graph

    return build
