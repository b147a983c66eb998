"""Split and contextualize one loaded document into the chunk records the store keeps (ingest's split and
contextualize stages).

Each record carries the chunk as users cite it (`content`), the text the indexes see (`indexed_text`: the context,
a blank line, the chunk, when there is a context) and the metadata filters and citations use.

Example::

    from ctxrag.indexing.chunking import chunk_records, make_splitter
    from ctxrag.settings import Settings
    records = chunk_records("demo", "demo:notes.md", "notes.md", "Notes", "# Notes\\n\\nFalcon pumps move water.", {},
                            splitter=make_splitter(Settings().chunking))
    records[0].chunk_id, records[0].indexed_text
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxrag import schema
from ctxrag.loading import ChunkSplitter
from ctxrag.settings import ChunkingSettings
from ctxrag.stores.documents.docstore import ChunkRecord

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.indexing.contexts.strategies import ChunkContextualizer

KEPT_METADATA = ("file_type", "language", "collection", "tags", "note_id")
"""Loader metadata copied onto every chunk (collection/tags/note_id: the notes filters)."""


def make_splitter(chunking: ChunkingSettings) -> ChunkSplitter:
    return ChunkSplitter(chunk_size=chunking.chunk_size, chunk_overlap=chunking.chunk_overlap, unit=chunking.unit)


def chunk_records(
    kb_name: str, doc_id: str, source: str, title: str, text: str, meta: dict[str, Any], *,
    splitter: ChunkSplitter, contextualizer: ChunkContextualizer | None = None,
    precomputed: dict[str, str] | None = None,
) -> list[ChunkRecord]:
    """Split `text` (code mode when `meta` names a language), add each chunk's context (from `precomputed`, keyed
    by chunk id, else from `contextualizer`), and build the records of document `doc_id`."""
    mode = "code" if meta.get("language") else "text"
    try:
        pieces = splitter.split_text(text, mode=mode)
    except TypeError:  # a splitter without modes
        pieces = splitter.split_text(text)
    contexts: list[str | None] = [None] * len(pieces)
    if precomputed:
        contexts = [precomputed.get(schema.make_chunk_id(doc_id, p.index)) for p in pieces]
    elif contextualizer is not None and pieces:
        contexts = list(contextualizer.contextualize_document(
            text, [p.text for p in pieces], title=title, heading_paths=[p.heading_path for p in pieces],
            offsets=[p.start_index for p in pieces],
        ))
    out = []
    for p, ctx in zip(pieces, contexts):
        cid = schema.make_chunk_id(doc_id, p.index)
        indexed_text = f"{ctx}\n\n{p.text}" if ctx else p.text
        md = {
            schema.CHUNK_ID: cid, schema.DOC_ID: doc_id, schema.KB: kb_name, schema.SOURCE: source,
            schema.TITLE: title, schema.CHUNK_INDEX: p.index, schema.START_INDEX: p.start_index,
            schema.END_INDEX: p.end_index, schema.HEADING_PATH: p.heading_path,
        }
        for key in KEPT_METADATA:
            if key in meta:
                md[key] = meta[key]
        if ctx:
            md[schema.CONTEXT] = ctx
        out.append(ChunkRecord(cid, doc_id, p.index, p.text, indexed_text, ctx, md))
    return out
