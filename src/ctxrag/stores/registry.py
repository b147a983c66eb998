"""The index kinds a knowledge base keeps, and how to make or load each: dense (the configured vector store), BM25,
and the graph index when ``settings.graph`` is on. FAISS and BM25 are kept as immutable segments shared between
generations (`ctxrag.stores.engine.segments`); so is the graph index, whose segments are merged into one graph in memory
when a generation is read (`ctxrag.stores.graph.segmented`).

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
from typing import TYPE_CHECKING, Any

from ctxrag.settings import Settings
from ctxrag.stores.vectors.backends import dense_factories
from ctxrag.stores.vectors.dense import FaissIndex
from ctxrag.stores.vectors.dense_segments import SegmentedDenseIndex
from ctxrag.stores.documents.docstore import ChunkRecord
from ctxrag.stores.embedding import EmbedFn
from ctxrag.stores.engine.segments import LoadIndex, MakeIndex, SegmentedIndex
from ctxrag.stores.engine.snapshots import IndexFactories

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.embeddings import Embeddings  # a type only: opening a knowledge base loads no embedding stack


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
    extract_triplets: Callable[[str], Any] | None = None
    """The graph index's triplet extractor for chunks that arrive without triplets (`ctxrag.indexing.triplets`)."""


def index_factories(setup: IndexSetup | None = None) -> IndexFactories:
    """Index kinds: name -> (make empty, load from a generation folder; None means rebuild from the store).

    Without a `setup` the dense index is FAISS with default settings and there is no graph index."""
    factories: dict[str, tuple[Callable[[], Any], Callable[[Path], Any]]] = {}
    if setup is None:
        factories["dense"] = segmented("dense", SegmentedDenseIndex, FaissIndex, FaissIndex.load)
    elif setup.settings.dense_backend == "faiss":
        make, load = dense_factories(setup.settings, setup.kb_name, setup.root, chunks=setup.chunks,
                                     embed=setup.embed)
        factories["dense"] = segmented("dense", SegmentedDenseIndex, make, load, setup.kb_name)
    else:  # Chroma and Milvus persist themselves: no segments in the generation folder
        factories["dense"] = dense_factories(setup.settings, setup.kb_name, setup.root, chunks=setup.chunks,
                                             embed=setup.embed)
    try:
        from ctxrag.stores.bm25 import BM25ChunkIndex
        from ctxrag.stores.bm25.segmented import SegmentedKeywordIndex
    except ImportError:  # pragma: no cover - bm25 ships with ctxrag; guard for partial installs
        pass
    else:
        stem = setup is not None and setup.settings.bm25_stem
        factories["bm25"] = segmented("bm25", SegmentedKeywordIndex, lambda: BM25ChunkIndex("mixed", stem=stem),
                                      BM25ChunkIndex.load, setup.kb_name if setup is not None else "NAME")
    if setup is not None and setup.settings.graph:
        factories["graph"] = _graph_factories(setup)
    return factories


def segmented(
    name: str, kind: type[SegmentedIndex], make: MakeIndex, load: LoadIndex, kb_name: str = "NAME"
) -> tuple[Callable[[], Any], Callable[[Path], Any]]:
    """(make empty, load) of index kind `name` kept as immutable segments (see `ctxrag.stores.engine.segments`)."""
    return ((lambda: kind(name, make, load, kb_name=kb_name)),
            (lambda directory: kind(name, make, load, kb_name=kb_name).load_set(directory)))


def _graph_factories(setup: IndexSetup) -> tuple[Callable[[], Any], Callable[[Path], Any]]:
    """Graph RAG index (opt-in, ``CTXRAG_GRAPH=true``), kept as segments like FAISS and BM25 and searched as one
    merged graph (`ctxrag.stores.graph.segmented`): triplets from ``metadata["triplets"]`` or, failing that,
    extracted by the configured chat model, which is only built when a chunk needs it."""
    from ctxrag.stores.graph.segmented import SegmentedGraphIndex

    extractor = setup.extract_triplets
    return (
        lambda: SegmentedGraphIndex.empty(setup.embeddings(), extractor=extractor, kb_name=setup.kb_name),
        lambda d: SegmentedGraphIndex.load(d, setup.embeddings(), extractor=extractor, kb_name=setup.kb_name),
    )
