"""Where the files shipped inside the package live (``src/ctxrag/resources``): routing set, router vectors, stopwords.

Runtime code (the router) and evaluation both read these, so the paths live here, below both.

Example::

    from ctxrag.resource_paths import routing_dir
    (routing_dir() / "routing_set.jsonl").is_file()   # True
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

ROUTING_DIR = "routing"


def resource_dir(*parts: str) -> Path:
    """``ctxrag/resources/<parts...>`` as a filesystem path."""
    return Path(str(resources.files("ctxrag").joinpath("resources", *parts)))


def routing_dir() -> Path:
    """The labelled routing set, its off-topic corpus and the router's precomputed vectors."""
    return resource_dir(ROUTING_DIR)


def default_routing_set() -> Path:
    """The labelled routing questions (one JSON object a line)."""
    return routing_dir() / "routing_set.jsonl"


def offtopic_corpus() -> Path:
    """A small baking / gardening / running corpus the routing set asks off-topic questions against."""
    return routing_dir() / "offtopic_corpus"
