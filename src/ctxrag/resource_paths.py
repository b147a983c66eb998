"""Where the files shipped inside the package live (``src/ctxrag/resources``): routing set, router vectors, stopwords,
the demo's sample corpus and questions (``examples/`` in the repository links to the same files).

Runtime code (the router) and evaluation both read these, so the paths live here, below both.

Example::

    from ctxrag.resource_paths import routing_dir
    (routing_dir() / "routing_set.jsonl").is_file()   # True
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

ROUTING_DIR = "routing"
DEMO_DIR = "demo"


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


def demo_corpus() -> Path:
    """The six-file Chinese/English sample corpus `ctxrag demo` ingests."""
    return resource_dir(DEMO_DIR, "sample_corpus")


def demo_questions() -> Path:
    """The demo's questions (a JSON list of objects with ``question``, ``answer``, ``source``, ``key_facts``)."""
    return resource_dir(DEMO_DIR, "sample_questions.json")
