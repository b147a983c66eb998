"""`ctxrag.resource_paths`: the shipped files the router and the routing evaluation read are where the paths say."""
from __future__ import annotations

from ctxrag.resource_paths import default_routing_set, offtopic_corpus, resource_dir, routing_dir


def test_shipped_resources_exist() -> None:
    assert default_routing_set().is_file() and default_routing_set().parent == routing_dir()
    assert offtopic_corpus().is_dir() and any(offtopic_corpus().iterdir())
    assert (resource_dir("stopwords") / "en.txt").is_file()
    assert (routing_dir() / "router_vectors.npy").is_file()
