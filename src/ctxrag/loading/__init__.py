"""Loading files (txt, Markdown, HTML, PDF, DOCX, JSON/JSONL records, source code) and splitting them into chunks."""
from ctxrag.loading.encoding import decode_bytes
from ctxrag.loading.loaders import (
    SUPPORTED_EXTENSIONS,
    LoadedDocument,
    as_loaded_document,
    expand_paths,
    file_kind,
    iter_files,
    load_file,
    require_given_paths,
)
from ctxrag.loading.splitter import (
    ChineseAwareSplitter,
    Chunk,
    ChunkSplitter,
    SplitMode,
    SplitUnit,
    approx_token_count,
)

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "ChineseAwareSplitter",
    "Chunk",
    "ChunkSplitter",
    "LoadedDocument",
    "SplitMode",
    "SplitUnit",
    "approx_token_count",
    "as_loaded_document",
    "decode_bytes",
    "expand_paths",
    "file_kind",
    "iter_files",
    "load_file",
    "require_given_paths",
]
