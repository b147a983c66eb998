"""Exceptions raised by ctxrag (every message names the offending file, field or value), and the one deprecation warning
of its thin aliases."""
from __future__ import annotations

import warnings


class CtxragError(Exception):
    """Base class of every error ctxrag raises on purpose."""


class ConfigError(CtxragError, ValueError):
    """A setting or option has a bad value."""


class LoadError(CtxragError):
    """A file could not be loaded (missing, empty, binary, unsupported, corrupt)."""

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class PathNotFound(LoadError, FileNotFoundError):
    """A file or folder given to ingest does not exist (raised before anything is written; a bad file found inside
    a given folder is reported in the ingest report instead)."""


class KnowledgeBaseNotFound(CtxragError, KeyError):
    """The named knowledge base does not exist."""

    def __init__(self, name: str, home: object) -> None:
        self.name = name
        super().__init__(f"unknown knowledge base {name!r} (none under {home}); create it with `ctxrag ingest PATH --kb {name}`")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class KnowledgeBaseDeleted(KnowledgeBaseNotFound):
    """The knowledge base was deleted (or deleted and created again) by another process while this one had it open.

    A writer gets it instead of silently creating a new, partial knowledge base; a reader instead of a raw
    ``FileNotFoundError``. Open it again (or ingest again) to use the one that exists now."""

    def __init__(self, name: str, detail: str) -> None:
        self.name = name
        CtxragError.__init__(self, f"knowledge base {name!r} was deleted {detail}")


class DocumentNotFound(CtxragError, KeyError):
    """No document with that id or source is stored."""

    def __str__(self) -> str:
        return self.args[0]


class AmbiguousDocument(CtxragError, ValueError):
    """A document key (a file name or trailing path) matches several stored documents; the message lists them."""


class IndexCorruptError(CtxragError):
    """An index file on disk is missing, truncated or not what it claims to be."""


class ModelError(CtxragError):
    """A model (chat, embeddings, rerank) could not be loaded or reached, or answered garbage."""


class ModelFileError(ModelError):
    """The local model file could not be assembled or failed its checksum."""


class QueryError(CtxragError, ValueError):
    """A query or question is empty or longer than ``Settings.max_query_chars``."""


class KnowledgeBaseLocked(CtxragError):
    """Another process holds a knowledge base's write lock for longer than the configured timeout."""


class StoreCorruptError(CtxragError):
    """A knowledge base's document store (``kb.sqlite``) is missing, truncated or not a SQLite database."""


class DiskFullError(CtxragError, OSError):
    """A write ran out of disk space; what was committed before is intact (nothing was lost), the write was not
    made. Free some space and run it again."""


def disk_full(path: object, error: BaseException, what: str) -> DiskFullError:
    """The one message for a write that found the disk full: nothing lost, nothing to repair, free space and retry."""
    return DiskFullError(f"{path}: the disk is full ({error}); {what} Nothing was lost: the knowledge base is as it "
                         "was before this write and needs no repair; free some space and run the command again")


LOW_SPACE_BYTES = 8 << 20
"""An I/O error while the file system has less room than this counts as a full disk: SQLite reports a write-ahead
log or shared-memory file that cannot grow as a plain I/O error (SQLITE_IOERR), not SQLITE_FULL. The margin is
above what one SQLite step grows those files by (its automatic checkpoint size), so a full disk is never missed;
a damaged file on a nearly full disk is then reported as a full disk first, which is the right thing to fix first."""


def is_disk_full(error: BaseException, where: object = None) -> bool:
    """True for "no space left": ``OSError`` ENOSPC or EDQUOT, SQLite's SQLITE_FULL ("database or disk is full"),
    or, when `where` (a path on the file system written to) is given, SQLite's SQLITE_IOERR while that file system
    is (nearly) full. A full disk is not damage: nothing was lost."""
    import errno
    import sqlite3

    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_FULL or "disk is full" in str(error):
            return True
        is_io_error = (code & 0xFF) == sqlite3.SQLITE_IOERR if code is not None else "disk I/O error" in str(error)
        return is_io_error and where is not None and _low_on_space(where)
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def _low_on_space(where: object) -> bool:
    """Whether the file system holding `where` (or its nearest existing parent) has less than `LOW_SPACE_BYTES`."""
    import shutil
    from pathlib import Path

    path = Path(str(where))
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free < LOW_SPACE_BYTES
    except OSError:
        return False


def warn_deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """A `DeprecationWarning` for a thin alias kept for callers: ``"{old} is deprecated: use {new}"``, pointing at the
    caller of the alias (`stacklevel` 3: the alias's caller)."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel)
