"""Metadata keys every chunk `Document` carries, so stages agree without importing each other.

A chunk is a LangChain `Document` whose `id` equals ``metadata["chunk_id"]``. Keys:

- ``chunk_id`` (str): stable id ``"{doc_id}:{chunk_index}"``; fusion and dedup use it, never the page text.
- ``doc_id`` (str): id of the source document (hash of the knowledge base name and source path, or given).
- ``kb`` (str): knowledge base name.
- ``source`` (str): file path or URI the document came from; ``title`` (str): document title.
- ``chunk_index`` (int), ``start_index`` / ``end_index`` (int): character offsets in the document text.
- ``heading_path`` (str): Markdown heading path, ``"A > B"`` ('' if none).
- ``context`` (str, optional): the contextual-retrieval context written for this chunk.
- identity (`chunk_key`): ``chunk_id``, else ``Document.id``, else a sha256 of ``source`` and the page text, so two
  chunks with the same text stay two chunks (fusion and the redundancy filter dedup on it).
- ``score`` (float): the last stage's score; each stage may also add its own key
  (``dense_score``, ``bm25_score``, ``fusion_score``, ``rerank_score``, ...).
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_core.documents import Document

CHUNK_ID = "chunk_id"
DOC_ID = "doc_id"
KB = "kb"
SOURCE = "source"
TITLE = "title"
CHUNK_INDEX = "chunk_index"
START_INDEX = "start_index"
END_INDEX = "end_index"
HEADING_PATH = "heading_path"
CONTEXT = "context"
SCORE = "score"


def make_doc_id(kb: str, source: str) -> str:
    """Stable document id from knowledge base name and source path."""
    return hashlib.sha1(f"{kb}\x00{source}".encode("utf-8")).hexdigest()[:16]


def make_chunk_id(doc_id: str, chunk_index: int) -> str:
    """Stable chunk id: document id and position."""
    return f"{doc_id}:{chunk_index}"


def content_hash(text: str) -> str:
    """sha256 of UTF-8 text, hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_key(doc: Document) -> str:
    """The identity fusion and dedup use: ``chunk_id``, else ``Document.id``, else sha256 of source and text.

    Example: ``chunk_key(Document("x", id="d:0"))`` is ``"d:0"``.
    """
    chunk_id = doc.metadata.get(CHUNK_ID)
    if chunk_id is not None and chunk_id != "":
        return str(chunk_id)
    if doc.id:
        return str(doc.id)
    source = str(doc.metadata.get(SOURCE, ""))
    return "sha256:" + hashlib.sha256(f"{source}\x00{doc.page_content}".encode("utf-8")).hexdigest()
