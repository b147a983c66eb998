"""The index kinds a knowledge base keeps, and how to make or load each: dense (the configured vector store), BM25,
and the graph index when ``settings.graph`` is on.

`IndexSetup` is what opening them needs from the knowledge base (its name, folder, settings, the committed chunks and
the embedding model), so this module never imports the knowledge base.

Example::

    from ctxrag.stores.registry import IndexSetup, index_factories
    setup = IndexSetup("demo", kb_root, settings, chunks=store.iter_chunks,
                       embeddings=lambda: emb, embed=lambda texts: embed_array(emb, texts))
    make, load = index_factories(setup)["bm25"]
    index = make()                               # an empty BM25 index
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from ctxrag.settings import Settings
from ctxrag.stores.backends import dense_factories
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.dense import FaissIndex
from ctxrag.stores.docstore import ChunkRecord
from ctxrag.stores.embedding import EmbedFn
from ctxrag.stores.snapshots import IndexFactories


@dataclass
class IndexSetup:
    """What opening the indexes of one knowledge base needs."""

    kb_name: str
    root: Path
    """The knowledge base folder (Chroma keeps ``root/chroma``, Milvus Lite ``root/milvus.db``)."""
    settings: Settings
    chunks: Callable[[], Iterable[ChunkRecord]]
    """The committed chunks, read when a self-persisting store is reconciled on open."""
    embeddings: Callable[[], Embeddings]
    """The embedding model, built on first use (the graph index embeds entities with it)."""
    embed: EmbedFn
    """Passage vectors from that model (rebuilding and reconciling the dense index)."""


def index_factories(setup: IndexSetup | None = None) -> IndexFactories:
    """Index kinds: name -> (make empty, load from a generation folder; None means rebuild from the store).

    Without a `setup` the dense index is FAISS with default settings and there is no graph index."""
    factories: dict[str, tuple[Callable[[], Any], Callable[[Path], Any]]] = {}
    if setup is None:
        factories["dense"] = (FaissIndex, FaissIndex.load)
    else:
        factories["dense"] = dense_factories(setup.settings, setup.kb_name, setup.root, chunks=setup.chunks,
                                             embed=setup.embed)
    try:
        from ctxrag.retrievers.bm25 import BM25ChunkIndex
    except ImportError:  # pragma: no cover - bm25 ships with ctxrag; guard for partial installs
        pass
    else:
        factories["bm25"] = (BM25ChunkIndex, BM25ChunkIndex.load)
    if setup is not None and setup.settings.graph:
        factories["graph"] = _graph_factories(setup)
    return factories


def _graph_factories(setup: IndexSetup) -> tuple[Callable[[], Any], Callable[[Path], Any]]:
    """Graph RAG index (opt-in, ``CTXRAG_GRAPH=true``): triplets from ``metadata["triplets"]`` or, failing that,
    extracted by the configured chat model, which is only built when a chunk needs it."""
    from ctxrag.graph import GraphIndex

    extractor = LazyTripletExtractor(setup.settings)
    return (
        lambda: GraphIndex(setup.embeddings(), extractor=extractor, show_progress=False),
        lambda d: GraphIndex.load(d, setup.embeddings(), extractor=extractor, show_progress=False),
    )


def triplet_stage(settings: Settings) -> Callable[[list[IndexedChunk]], None] | None:
    """When the graph index is on: a function that puts each chunk's triplets into ``metadata["triplets"]`` (extracted
    from its indexed text by the chat model), so ingest extracts them before the write lock and `GraphIndex.add`
    only reads them. None when the graph index is off."""
    if not settings.graph:
        return None
    from ctxrag.graph import TRIPLETS_KEY

    extractor = LazyTripletExtractor(settings)

    def extract(chunks: list[IndexedChunk]) -> None:
        for chunk in chunks:
            if TRIPLETS_KEY not in chunk.metadata:
                chunk.metadata[TRIPLETS_KEY] = extractor(chunk.text)

    return extract


class LazyTripletExtractor:
    """`TripletExtractor` over the configured chat model, built on the first call (most opens never extract)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._inner: Any = None

    def __call__(self, text: str) -> Any:
        if self._inner is None:
            from ctxrag.graph import TripletExtractor
            from ctxrag.models.chat import make_chat_model

            self._inner = TripletExtractor(make_chat_model(self.settings))
        return self._inner(text)
