"""Load one file into a `LoadedDocument`, and expand folders into the files to load.

Every failure is a `ctxrag.errors.LoadError(path, reason)`: missing path, a folder given to `load_file`,
unsupported extension, unreadable, a symbolic link loop or broken link, over the size limit, empty or
whitespace-only, binary, undecodable bytes, corrupt PDF/DOCX, malformed JSON (with line number). Callers that
ingest many files catch it per file and go on. A JSONL file keeps its good lines; the bad ones are listed in
`LoadedDocument.warnings` by line number.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxrag.errors import ConfigError, LoadError, PathNotFound
from ctxrag.loading.converters import (
    docx_to_text,
    html_to_text,
    parse_json_records,
    parse_jsonl_records,
    pdf_to_text,
    records_to_text,
)
from ctxrag.loading.encoding import decode_bytes

TEXT_EXTENSIONS = frozenset({".txt", ".text", ".log", ".rst"})
MARKDOWN_EXTENSIONS = frozenset({".md", ".markdown", ".mdx"})
HTML_EXTENSIONS = frozenset({".html", ".htm", ".xhtml"})
CODE_LANGUAGES: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript", ".java": "java", ".go": "go", ".rs": "rust",
    ".c": "c", ".h": "c", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".cs": "csharp",
    ".rb": "ruby", ".php": "php", ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".sql": "sql", ".kt": "kotlin",
    ".kts": "kotlin", ".swift": "swift", ".scala": "scala", ".lua": "lua", ".r": "r", ".pl": "perl", ".m": "objc",
    ".dart": "dart", ".vue": "vue", ".css": "css", ".scss": "scss", ".yaml": "yaml", ".yml": "yaml",
    ".toml": "toml", ".ini": "ini", ".cfg": "ini", ".xml": "xml", ".proto": "protobuf",
}
CODE_FILENAMES: dict[str, str] = {"Makefile": "make", "Dockerfile": "dockerfile", "CMakeLists.txt": "cmake"}
SUPPORTED_EXTENSIONS = frozenset(
    TEXT_EXTENSIONS | MARKDOWN_EXTENSIONS | HTML_EXTENSIONS | set(CODE_LANGUAGES) | {".pdf", ".docx", ".json", ".jsonl", ".ndjson"}
)
SKIPPED_DIRECTORIES = frozenset({"__pycache__", "node_modules", ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".mypy_cache"})
_MARKDOWN_H1 = re.compile(r"^# +(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass
class LoadedDocument:
    """A loaded file: its text, resolved source path, title and metadata.

    ``metadata`` always has ``file_type`` (``text``, ``markdown``, ``html``, ``pdf``, ``docx``, ``json``,
    ``jsonl``, ``code``) and ``encoding`` (``"binary"`` for PDF/DOCX); code files add ``language``; PDFs add
    ``page_starts`` and ``page_count``; JSON/JSONL add ``record_count``. ``records`` (JSON/JSONL only) holds
    one dict per record: ``index``, ``line`` (JSONL), ``start_index``/``end_index`` of its block in ``text``,
    and the original ``data``.

    >>> doc = load_file(Path("examples/sample_corpus/xinghe_overview.md"))  # doctest: +SKIP
    >>> doc.title, doc.metadata["file_type"]  # doctest: +SKIP
    ('星河知识库产品概览', 'markdown')
    """

    text: str
    source: str
    title: str
    metadata: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] | None = None
    warnings: list[str] = field(default_factory=list)
    """What was loaded only in part (e.g. JSONL lines skipped as malformed), for the ingest report."""

    def to_document(self) -> Any:
        """This file as a LangChain `Document` (metadata plus ``source`` and ``title``; no records)."""
        from langchain_core.documents import Document

        return Document(page_content=self.text, metadata={**self.metadata, "source": self.source, "title": self.title})


def file_kind(path: Path) -> str | None:
    """The ``file_type`` a path would load as, or None when unsupported."""
    if path.name in CODE_FILENAMES:
        return "code"
    suffix = path.suffix.lower()
    if suffix in MARKDOWN_EXTENSIONS:
        return "markdown"
    if suffix in TEXT_EXTENSIONS:
        return "text"
    if suffix in HTML_EXTENSIONS:
        return "html"
    if suffix in CODE_LANGUAGES:
        return "code"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in (".pdf", ".docx", ".json"):
        return suffix[1:]
    return None



def as_loaded_document(i: int, item: Any) -> LoadedDocument:
    """An ``add_texts`` item (a `LoadedDocument`, or a dict with ``text``, ``source`` and optional ``title``,
    ``metadata``, ``file_type``) as a `LoadedDocument`; a bad dict raises `ConfigError` naming its position."""
    if not isinstance(item, dict):
        return item
    if not isinstance(item.get("text"), str) or not isinstance(item.get("source"), str) or not item["source"]:
        raise ConfigError(f"add_texts item {i}: needs string fields 'text' and 'source', got keys {sorted(item)}")
    return LoadedDocument(item["text"], item["source"], item.get("title") or item["source"],
                          dict(item.get("metadata") or {}, file_type=item.get("file_type", "text")))


def resolved(path: Path) -> Path:
    """``path.resolve()``, or `LoadError` for a symbolic link loop (Python raises RuntimeError or OSError)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        raise LoadError(path, f"symbolic link loop, cannot resolve the path ({exc}); skipped") from None


def _identity(path: Path) -> Path:
    """The key a file is deduplicated by: its resolved path, or the absolute path when it cannot be resolved (a
    link loop is still yielded, so `load_file` reports it instead of the whole walk failing)."""
    try:
        return resolved(path)
    except LoadError:
        return path.absolute()


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except PermissionError:
        raise LoadError(path, "permission denied (file is not readable)") from None
    except OSError as exc:
        raise LoadError(path, f"cannot read file: {exc.strerror or exc}") from None


def _read_text(path: Path) -> tuple[str, str]:
    data = _read_bytes(path)
    if not data:
        raise LoadError(path, "file is empty")
    text, encoding = decode_bytes(data, path)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise LoadError(path, "file contains only whitespace")
    return text, encoding


def _markdown_title(text: str) -> str | None:
    match = _MARKDOWN_H1.search(text)
    return match.group(1).strip() if match else None


def load_file(path: Path | str, *, max_bytes: int | None = None) -> LoadedDocument:
    """Load one supported file. Raises `LoadError` naming the file and the reason.

    `max_bytes` refuses larger files before reading them (``Settings.max_file_bytes`` at ingest).

    >>> load_file("notes.md").text  # doctest: +SKIP
    """
    path = Path(path).expanduser()
    if path.is_symlink():
        target = resolved(path)
        if not target.exists():
            raise LoadError(path, f"broken symbolic link (to {str(target)!r})")
    if not path.exists():
        raise LoadError(path, "no such file")
    if path.is_dir():
        raise LoadError(path, "is a directory; expand folders with iter_files()/expand_paths() first")
    if not path.is_file():
        raise LoadError(path, "not a regular file")
    kind = file_kind(path)
    if kind is None:
        raise LoadError(path, f"unsupported file type {path.suffix or '(no extension)'!r}; supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}")
    source = str(resolved(path))
    if max_bytes is not None:
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise LoadError(path, f"cannot read file: {exc.strerror or exc}") from None
        if size > max_bytes:
            raise LoadError(path, f"file is {size:,} bytes, over the limit of {max_bytes:,} bytes "
                                  "(setting max_file_bytes, env CTXRAG_MAX_FILE_BYTES)")
    metadata: dict[str, Any] = {"file_type": kind}
    warnings: list[str] = []
    title: str | None = None
    records: list[dict[str, Any]] | None = None

    if kind == "pdf":
        data = _read_bytes(path)
        if not data.strip():
            raise LoadError(path, "file is empty")
        text, pdf_meta = pdf_to_text(path)
        metadata.update(encoding="binary", **pdf_meta)
        title = _markdown_title(text)
    elif kind == "docx":
        if not _read_bytes(path):
            raise LoadError(path, "file is empty")
        text, core_title = docx_to_text(path)
        if not text.strip():
            raise LoadError(path, "DOCX has no text")
        metadata["encoding"] = "binary"
        title = _markdown_title(text) or core_title
    else:
        raw, encoding = _read_text(path)
        metadata["encoding"] = encoding
        if kind == "html":
            text, html_title = html_to_text(raw)
            if not text.strip():
                raise LoadError(path, "HTML has no visible text")
            title = html_title or _markdown_title(text)
        elif kind in ("json", "jsonl"):
            if kind == "json":
                parsed, lines = parse_json_records(raw, path), None
            else:
                bad: list[tuple[int, str]] = []
                parsed, lines = parse_jsonl_records(raw, path, bad_lines=bad)
                if bad and not parsed:
                    raise LoadError(path, f"no valid JSON line ({len(bad)} malformed; {bad[0][1]})")
                if bad:
                    shown = ", ".join(str(n) for n, _ in bad[:20]) + (", ..." if len(bad) > 20 else "")
                    warnings.append(f"skipped {len(bad)} malformed line(s): {shown} (first: {bad[0][1]})")
            text, records = records_to_text(parsed, lines)
            if not records:
                raise LoadError(path, "no records with text")
            metadata["record_count"] = len(records)
        elif kind == "code":
            text = raw
            metadata["language"] = CODE_FILENAMES.get(path.name) or CODE_LANGUAGES[path.suffix.lower()]
        else:
            text = raw
            title = _markdown_title(text)
    return LoadedDocument(text=text, source=source, title=title or path.stem, metadata=metadata, records=records,
                          warnings=warnings)


def _is_skipped(name: str) -> bool:
    return name.startswith(".") or name in SKIPPED_DIRECTORIES


def iter_files(paths: Iterable[Path | str], recursive: bool = True, *,
               errors: list[LoadError] | None = None) -> Iterator[Path]:
    """Files to load: explicit files as given (even unsupported ones, so `load_file` reports them), folders
    expanded to their supported files in sorted order, skipping hidden entries, ``.git``, ``__pycache__``,
    ``node_modules`` and virtualenvs. Raises `LoadError` when a path does not exist; each file is yielded once.
    A folder that cannot be listed (no permission, a path over the system's limit) is a `LoadError` appended to
    `errors` (raised when `errors` is None), never silently skipped; any depth of folders works (no recursion).

    >>> list(iter_files([Path("examples/sample_corpus")]))  # doctest: +SKIP
    """
    seen: set[Path] = set()
    for given in paths:
        path = Path(given).expanduser()
        if path.is_symlink() and not path.exists():
            raise LoadError(path, f"broken symbolic link (to {str(resolved(path))!r})")
        if not path.exists():
            raise LoadError(path, "no such file or directory")
        if not path.is_dir():
            if _identity(path) not in seen:
                seen.add(_identity(path))
                yield path
            continue
        if recursive:
            problems: list[LoadError] = []
            found = _walk(path, problems)
            if problems and errors is None:
                raise problems[0]
            if errors is not None:
                errors.extend(problems)
        else:
            found = [p for p in path.iterdir() if (p.is_file() or p.is_symlink()) and not _is_skipped(p.name)]
        for file in sorted(found):
            if file_kind(file) is not None and _identity(file) not in seen:
                seen.add(_identity(file))
                yield file


def _walk(top: Path, errors: list[LoadError]) -> list[Path]:
    """Every non-hidden file under `top`, with an explicit stack (``os.walk`` recursed once per level: a deep tree
    was a RecursionError that aborted the whole ingest) and every unreadable folder reported in `errors`."""
    found: list[Path] = []
    stack = [str(top)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as e:
            errors.append(LoadError(folder if len(folder) < 300 else f"{folder[:150]}...{folder[-100:]}",
                                    f"cannot list this folder ({e.strerror or e}; {len(os.fsencode(folder))} "
                                    "bytes of path)"))
            continue
        subfolders = []
        for entry in listed:
            if _is_skipped(entry.name):
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                subfolders.append(entry.path)
            else:
                found.append(Path(entry.path))
        stack.extend(reversed(subfolders))
    return found


def require_given_paths(paths: Iterable[Path | str]) -> list[Path]:
    """The given paths as a list, or `PathNotFound` naming every one that does not exist (a broken symbolic link
    counts as missing), with the folder relative paths were read from.

    >>> require_given_paths(["no-such-folder"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ctxrag.errors.PathNotFound: no-such-folder: no such file or directory (relative paths are read from ...)
    """
    given = [Path(p).expanduser() for p in paths]
    missing = [p for p in given if not p.exists()]
    if missing:
        where = f" (relative paths are read from {Path.cwd()})" if any(not p.is_absolute() for p in missing) else ""
        raise PathNotFound(", ".join(str(p) for p in missing), f"no such file or directory{where}")
    return given


def expand_paths(paths: Iterable[Path | str], recursive: bool = True) -> tuple[list[Path], list[LoadError]]:
    """Like `iter_files` but never raises: returns ``(files, errors)`` with one `LoadError` per missing path."""
    files: list[Path] = []
    errors: list[LoadError] = []
    seen: set[Path] = set()
    for given in paths:
        try:
            for file in iter_files([given], recursive=recursive, errors=errors):
                if _identity(file) not in seen:
                    seen.add(_identity(file))
                    files.append(file)
        except LoadError as exc:
            errors.append(exc)
    return files, errors
