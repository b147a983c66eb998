"""The triplet stage of ingest: graph triplets extracted by the chat model before the write lock, so the graph index
only reads them (``CTXRAG_GRAPH=true``).

Example::

    from ctxrag.indexing.triplets import triplet_stage
    stage = triplet_stage(settings)          # None when the graph index is off
    if stage: stage(chunks)                  # fills chunk.metadata["triplets"]
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxrag.graph import TRIPLETS_KEY, TripletExtractor
from ctxrag.models import chat as chat_models
from ctxrag.settings import Settings
from ctxrag.stores.base import IndexedChunk


def triplet_stage(settings: Settings) -> Callable[[list[IndexedChunk]], None] | None:
    """When the graph index is on: a function that puts each chunk's triplets into ``metadata["triplets"]`` (extracted
    from its indexed text by the chat model), so ingest extracts them before the write lock and `GraphIndex.add`
    only reads them. None when the graph index is off."""
    if not settings.graph:
        return None
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
            # looked up at call time: the configured chat model, also when a caller (or a test) replaces it
            self._inner = TripletExtractor(chat_models.make_chat_model(self.settings))
        return self._inner(text)
