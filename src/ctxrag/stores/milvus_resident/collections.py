"""The Milvus collections of a Milvus-resident knowledge base: their names, schemas and rows.

- chunks (``ctxkb_<name>_<hash>_chunks``): chunk id (primary key); the filterable scalars doc id, kb, source, title,
  heading path, language, chunk index; the chunk as cited (`content`), its `context`, the text the indexes see
  (`indexed_text`), the analyzed `bm25_text` feeding Milvus's ``BM25`` function into the sparse field `bm25`
  (SPARSE_INVERTED_INDEX, metric BM25); the `dense` vector (COSINE); all metadata as JSON; and `write_id`, the write
  that stored the chunk (what reconciling a crashed write reads). A write id names *what* was written (`write_id`:
  the document, its content hash and chunk ids), not which process wrote it: two nodes writing the same file at
  once leave a row and chunks that agree, whichever step of which node came last.
- staged (``..._staged``): the new version of a document being replaced, written whole before any of its chunks
  replaces an old one (the chunks schema), opened by a marker row (`ctxrag.stores.milvus_resident.staging`). While
  the document's row says ``swapping``, readers take its chunks from here instead of the chunks collection being
  overwritten; a replace interrupted while staging leaves the old version whole, one interrupted after it is
  finished from here.
- documents (``..._docs``): doc id (primary key), source, title, content hash (ingest skips unchanged files), summary,
  the text when it fits a VARCHAR (a longer one is stitched back from its chunks when read), chunk count, metadata,
  `status` (``ok``, ``writing``, ``swapping``: a replace whose staged copy is whole, ``deleting``) and `write_id` of
  the last write. A ``writing`` row names its writer (host, pid, proc, started, id) in its metadata under `ROW_WRITER`, so
  ``kb check`` / ``kb repair`` tell a new document another process is writing from one a kill left half written
  (`ctxrag.stores.milvus_resident.writers`); the key is gone once the row says ``ok`` and never reaches a reader. Rows
  written before writers were named have no such key (and no schema change was needed: metadata is JSON). Milvus
  needs a vector field in every collection: a constant 2-d `placeholder`.
- writers (``..._writers``, on a Milvus server only): one row per write in progress, its writer id (primary key),
  the writer (host, pid, ...) and `beat`, when it last said it is alive (`writers.Heartbeat`): how a process on
  another host tells a long write that still runs from one whose writer died. Made by the first write.

Milvus 2.3 has no analyzers or functions: there the chunks collection is dense only (no `bm25` field) and BM25
searches raise. Both collections carry the property ``ctxrag.kb`` (the knowledge base name, which may be CJK).

Example::

    from ctxrag.stores.milvus_resident.collections import collection_names
    collection_names("产品手册")      # ("ctxkb_____<hash>_chunks", "ctxkb_____<hash>_docs")
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import numpy as np

from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.engine.external import text_fingerprint
from ctxrag.stores.milvus_resident.analysis import analyzed_text, analyzer_params
from ctxrag.text import detect_language

PREFIX = "ctxkb_"
ID_MAX = 512
SHORT_MAX = 4096
TEXT_MAX = 65535
"""Milvus's longest VARCHAR (bytes)."""
STATUS_OK, STATUS_WRITING, STATUS_DELETING = "ok", "writing", "deleting"
STATUS_SWAPPING = "swapping"
"""A replace past staging: the new version is whole in the staging collection, where readers find it."""
ROW_WRITER = "_ctxrag_writer"
"""The metadata key of a ``writing`` documents row naming its writer (see the module docstring)."""
VISIBLE = (STATUS_OK, STATUS_SWAPPING)
"""Row states `doc list` shows (a ``writing`` row is a new document not yet whole)."""
CHUNK_FIELDS = ["chunk_id", "doc_id", "chunk_index", "content", "indexed_text", "context", "metadata", "write_id"]
"""What reading a chunk back fetches (no vectors, no analyzed text)."""
DOC_FIELDS = ["doc_id", "source", "title", "content_hash", "summary", "text", "n_chunks", "metadata", "status", "write_id",
              "added_at", "updated_at"]


def collection_names(kb_name: str) -> tuple[str, str]:
    """(chunks, documents) collection names: letters, digits and ``_`` only, unique per knowledge base name."""
    ascii_part = re.sub(r"[^A-Za-z0-9_]", "_", kb_name)[:40]
    base = f"{PREFIX}{ascii_part}_{hashlib.sha1(kb_name.encode('utf-8')).hexdigest()[:8]}"
    return f"{base}_chunks", f"{base}_docs"


def staging_name(kb_name: str) -> str:
    """The staging collection of a knowledge base (see the module docstring)."""
    return collection_names(kb_name)[0].removesuffix("_chunks") + "_staged"


def writers_name(kb_name: str) -> str:
    """The writers (heartbeat) collection of a knowledge base (see the module docstring)."""
    return collection_names(kb_name)[0].removesuffix("_chunks") + "_writers"


def writers_schema(client: Any) -> tuple[Any, Any]:
    """(schema, index params) of a writers collection."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("writer_id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("writer", DataType.JSON)
    schema.add_field("beat", DataType.DOUBLE)
    schema.add_field("placeholder", DataType.FLOAT_VECTOR, dim=2)
    index = client.prepare_index_params()
    index.add_index("placeholder", index_type="FLAT", metric_type="L2")
    return schema, index


def heartbeat_row(writer: dict[str, Any], beat: float) -> dict[str, Any]:
    """The writers row saying `writer` was alive at `beat` (epoch seconds)."""
    return {"writer_id": str(writer["id"]), "writer": writer, "beat": beat, "placeholder": [0.0, 0.0]}


def json_list(values: list[str]) -> str:
    """A list literal for a Milvus expression (Milvus Lite takes no filter templates)."""
    return json.dumps(list(values), ensure_ascii=False)


def properties(kb_name: str) -> dict[str, str]:
    """Collection properties naming the knowledge base a collection holds (``list_names`` on a server reads them)."""
    return {"ctxrag.kb": kb_name}


def kb_of(info: dict[str, Any]) -> str | None:
    """The knowledge base a described collection holds (None: not ctxrag's)."""
    return (info.get("properties") or {}).get("ctxrag.kb")


def analysis_of(fields: dict[str, dict[str, Any]], default: str) -> str:
    """How an existing chunks collection analyzes for BM25, read back from its analyzer."""
    params = (fields.get("bm25_text") or {}).get("params", {}).get("analyzer_params")
    if not params:
        return default
    if isinstance(params, str):
        params = json.loads(params)
    return "milvus" if params.get("tokenizer") == "jieba" else "ctxrag"


def chunks_schema(client: Any, dim: int, analysis: str, fulltext: bool, *, lite: bool) -> tuple[Any, Any]:
    """(schema, index params) of a chunks collection."""
    from pymilvus import DataType, Function, FunctionType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("chunk_id", DataType.VARCHAR, is_primary=True, max_length=ID_MAX)
    schema.add_field("doc_id", DataType.VARCHAR, max_length=ID_MAX)
    schema.add_field("kb", DataType.VARCHAR, max_length=SHORT_MAX)
    schema.add_field("source", DataType.VARCHAR, max_length=SHORT_MAX)
    schema.add_field("title", DataType.VARCHAR, max_length=SHORT_MAX)
    schema.add_field("heading_path", DataType.VARCHAR, max_length=SHORT_MAX)
    schema.add_field("language", DataType.VARCHAR, max_length=16)
    schema.add_field("chunk_index", DataType.INT64)
    schema.add_field("content", DataType.VARCHAR, max_length=TEXT_MAX)
    schema.add_field("context", DataType.VARCHAR, max_length=TEXT_MAX)
    schema.add_field("indexed_text", DataType.VARCHAR, max_length=TEXT_MAX)
    schema.add_field("text_hash", DataType.VARCHAR, max_length=32)
    schema.add_field("write_id", DataType.VARCHAR, max_length=64)
    schema.add_field("metadata", DataType.JSON)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    index = client.prepare_index_params()
    index.add_index("dense", index_type="FLAT", metric_type="COSINE")
    if fulltext:
        schema.add_field("bm25_text", DataType.VARCHAR, max_length=TEXT_MAX, enable_analyzer=True,
                         analyzer_params=analyzer_params(analysis, lite=lite))
        schema.add_field("bm25", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["bm25_text"],
                                     output_field_names=["bm25"]))
        index.add_index("bm25", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    return schema, index


def documents_schema(client: Any) -> tuple[Any, Any]:
    """(schema, index params) of a documents collection."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("doc_id", DataType.VARCHAR, is_primary=True, max_length=ID_MAX)
    schema.add_field("source", DataType.VARCHAR, max_length=SHORT_MAX)
    schema.add_field("title", DataType.VARCHAR, max_length=SHORT_MAX)
    schema.add_field("content_hash", DataType.VARCHAR, max_length=128)
    schema.add_field("summary", DataType.VARCHAR, max_length=TEXT_MAX)
    schema.add_field("text", DataType.VARCHAR, max_length=TEXT_MAX)
    schema.add_field("n_chunks", DataType.INT64)
    schema.add_field("metadata", DataType.JSON)
    schema.add_field("status", DataType.VARCHAR, max_length=16)
    schema.add_field("write_id", DataType.VARCHAR, max_length=64)
    schema.add_field("added_at", DataType.DOUBLE)
    schema.add_field("updated_at", DataType.DOUBLE)
    schema.add_field("placeholder", DataType.FLOAT_VECTOR, dim=2)
    index = client.prepare_index_params()
    index.add_index("placeholder", index_type="FLAT", metric_type="L2")
    return schema, index


def _fits(value: str, limit: int, what: str, chunk_id: str) -> str:
    if len(value.encode("utf-8")) > limit:
        raise ValueError(f"chunk {chunk_id!r}: {what} is longer than Milvus's {limit} bytes for that field "
                         f"({len(value.encode('utf-8'))} bytes); use smaller chunks")
    return value


def _clip(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def chunk_row(record: ChunkRecord, vector: np.ndarray, write_id: str, analysis: str | None) -> dict[str, Any]:
    """The chunks-collection row of a chunk (`analysis` None: a dense-only collection)."""
    md = record.metadata
    cid = record.chunk_id
    if len(cid.encode("utf-8")) > ID_MAX:
        raise ValueError(f"chunk id longer than {ID_MAX} bytes: {cid[:80]!r}...")
    row: dict[str, Any] = {
        "chunk_id": cid, "doc_id": _fits(record.doc_id, ID_MAX, "doc id", cid),
        "kb": _fits(str(md.get("kb", "")), SHORT_MAX, "kb", cid),
        "source": _fits(str(md.get("source", "")), SHORT_MAX, "source", cid),
        "title": _fits(str(md.get("title", "")), SHORT_MAX, "title", cid),
        "heading_path": _fits(str(md.get("heading_path", "")), SHORT_MAX, "heading path", cid),
        "language": str(md.get("language") or detect_language(record.content))[:16],
        "chunk_index": int(record.chunk_index),
        "content": _fits(record.content, TEXT_MAX, "content", cid),
        "context": _fits(record.context or "", TEXT_MAX, "context", cid),
        "indexed_text": _fits(record.indexed_text, TEXT_MAX, "indexed text", cid),
        "text_hash": text_fingerprint(record.indexed_text), "write_id": write_id, "metadata": md,
        "dense": np.asarray(vector, dtype=np.float32).reshape(-1).tolist(),
    }
    if analysis is not None:  # ctxrag's tokens can outgrow the text (identifier pieces): clipped, rarely
        row["bm25_text"] = _clip(analyzed_text(record.indexed_text, analysis), TEXT_MAX)
    return row


def record_of(row: dict[str, Any]) -> ChunkRecord:
    return ChunkRecord(row["chunk_id"], row["doc_id"], int(row["chunk_index"]), row["content"], row["indexed_text"],
                       row["context"] or None, dict(row["metadata"] or {}))


def write_id(doc: DocumentRecord, records: list[ChunkRecord]) -> str:
    """The write id of storing `doc` as `records`: equal for every writer of the same content and chunking."""
    h = hashlib.sha256(f"{doc.doc_id}\0{doc.content_hash}".encode())
    for r in records:
        h.update(b"\0" + r.chunk_id.encode("utf-8"))
    return h.hexdigest()[:32]


def document_row(doc: DocumentRecord, *, n_chunks: int, status: str, write_id: str, added_at: float,
                 updated_at: float, writer: dict[str, Any] | None = None) -> dict[str, Any]:
    """The documents row of `doc`; a ``writing`` row names `writer` (`ROW_WRITER`), any other none."""
    return {
        "doc_id": doc.doc_id, "source": doc.source, "title": doc.title[:1000], "content_hash": doc.content_hash,
        "summary": _clip(doc.summary or "", TEXT_MAX), "n_chunks": n_chunks,
        "text": doc.text if len(doc.text.encode("utf-8")) <= TEXT_MAX else "",
        "metadata": with_writer(doc.metadata, writer if status == STATUS_WRITING else None),
        "status": status, "write_id": write_id, "added_at": added_at, "updated_at": updated_at,
        "placeholder": [0.0, 0.0],
    }


def with_writer(metadata: dict[str, Any] | None, writer: dict[str, Any] | None) -> dict[str, Any]:
    """A row's metadata naming `writer` (None: naming none, the document's own metadata)."""
    own = {k: v for k, v in (metadata or {}).items() if k != ROW_WRITER}
    return {**own, ROW_WRITER: writer} if writer else own


def row_writer(row: dict[str, Any]) -> dict[str, Any] | None:
    """The writer a ``writing`` documents row names; None for any other row, or one written before writers were
    named."""
    if row.get("status") != STATUS_WRITING:
        return None
    writer = (row.get("metadata") or {}).get(ROW_WRITER)
    return dict(writer) if isinstance(writer, dict) else None


def stitch(records: list[ChunkRecord]) -> str:
    """A document's text from its chunks (in order), overlaps removed by their ``start_index`` offsets."""
    out: list[str] = []
    end = 0
    for r in records:
        start = r.metadata.get("start_index")
        text = r.content
        if isinstance(start, int) and start < end:
            text = text[end - start:]
        out.append(text if isinstance(start, int) or not out else "\n" + text)
        end = (start if isinstance(start, int) else end) + len(r.content)
    return "".join(out)
