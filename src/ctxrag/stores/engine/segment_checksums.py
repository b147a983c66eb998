"""Checksums of segment files, and when they are checked.

Each segment list (``segments.json``) records size and sha256 of every file of every segment. A segment never
changes once written, so its files are hashed when written and vouched for afterwards by the segment's verified
marker (`VERIFIED_FILE`): each file's sha256 with the device, inode, size, modification and change time it had when
written or last hashed. An open compares those with one `stat` per file and hashes only a file that does not match;
`full_verification` (``ctxrag kb check`` / ``kb repair``) and merges hash every file (as Lucene's ``CheckIndex`` and
merges verify whole checksums while its open checks lengths and footers), so damage under unchanged metadata is found
and never sealed into a new segment.

Example::

    from ctxrag.stores.engine.segment_checksums import checksums, verify
    files = checksums(segment_dir)                  # at write time: rel path -> {size, sha256}
    verify(segment_dir, files, kb_name="notes")     # at open: stat, hash what the marker cannot vouch for
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ctxrag.errors import IndexCorruptError

VERIFIED_FILE = ".verified.json"
"""Per segment folder: each file's sha256 with the (device, inode, size, mtime, ctime) it had when it was written
or last hashed. Not a segment file (not in the checksums); written without fsync: losing it costs one re-hash."""

TMP_PREFIX = ".tmp-"
"""Names starting with this are being written (renamed when complete; never read)."""


def repair_hint(kb_name: str) -> str:
    """The fix an `IndexCorruptError` about a segment names."""
    return f"run `ctxrag kb repair {kb_name}` to rebuild it from the document store"


_verified: set[tuple[str, int, int, int]] = set()
"""Segment files this process has checked against their sha256 (path, inode, size, mtime): a sealed segment never
changes, so each is read once per process instead of on every open."""

_full_verification: ContextVar[bool] = ContextVar("ctxrag_full_verification", default=False)


@contextlib.contextmanager
def full_verification() -> Iterator[None]:
    """Within this block every segment file loaded is hashed against its sha256, whatever its verified marker says
    (``ctxrag kb check`` and ``kb repair``: the only way to find damage that left a file's size and times alone).

    Example::

        with full_verification():
            index = SegmentedKeywordIndex(...).load_set(gen_dir / "bm25")
    """
    token = _full_verification.set(True)
    try:
        yield
    finally:
        _full_verification.reset(token)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checksums(directory: Path) -> dict[str, dict[str, Any]]:
    return {p.relative_to(directory).as_posix(): {"size": p.stat().st_size, "sha256": file_sha256(p)}
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != VERIFIED_FILE}


def stamp(p: Path, sha256: str, st: os.stat_result | None = None) -> dict[str, Any]:
    """What a verified marker records for file `p` with checksum `sha256` (`st`: its stat, if already taken): any
    rewrite, truncation, replacement or copy changes the inode, size, mtime or ctime (ctime cannot be set back from
    user space)."""
    st = st or p.stat()
    return {"sha256": sha256, "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns}


def _read_marker(directory: Path) -> dict[str, Any]:
    try:
        doc = json.loads((directory / VERIFIED_FILE).read_text(encoding="utf-8"))
        return doc["files"] if isinstance(doc.get("files"), dict) else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def write_marker(directory: Path, files: dict[str, Any]) -> None:
    """Best effort (a read-only folder, a segment removed meanwhile): without a marker the next open hashes again."""
    tmp = directory / f"{TMP_PREFIX}{VERIFIED_FILE}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_text(json.dumps({"version": 1, "files": files}), encoding="utf-8")
        os.replace(tmp, directory / VERIFIED_FILE)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _key(p: Path, st: os.stat_result) -> tuple[str, int, int, int]:
    return (str(p), st.st_ino, st.st_size, st.st_mtime_ns)


def remember_verified(directory: Path, files: dict[str, dict[str, Any]]) -> None:
    for rel in files:
        p = directory / rel
        _verified.add(_key(p, p.stat()))


def verify(directory: Path, files: dict[str, dict[str, Any]], kb_name: str, *, full: bool = False) -> None:
    """Each file of a segment against its size and sha256. A file is hashed once per process, and not at all while
    the segment's verified marker (`VERIFIED_FILE`) shows it unchanged since it was written or last hashed; with
    `full` (or inside `full_verification`) every file is hashed."""
    full = full or _full_verification.get()
    marker = None if full else _read_marker(directory)
    hashed: dict[str, Any] = {}
    for rel, want in files.items():
        p = directory / rel
        try:
            st = p.stat()
        except FileNotFoundError:
            raise IndexCorruptError(f"{p}: segment file is missing; {repair_hint(kb_name)}") from None
        key = _key(p, st)
        if st.st_size != want.get("size"):
            raise IndexCorruptError(f"{p}: segment file has {st.st_size} bytes, the segment list says {want.get('size')}; "
                                  f"{repair_hint(kb_name)}")
        if not full and (key in _verified or (marker and marker.get(rel) == stamp(p, str(want.get("sha256")), st))):
            _verified.add(key)
            continue
        if file_sha256(p) != want.get("sha256"):
            raise IndexCorruptError(f"{p}: segment file checksum does not match (damaged in place); {repair_hint(kb_name)}")
        _verified.add(key)
        hashed[rel] = stamp(p, str(want["sha256"]), st)
    if hashed:
        known = _read_marker(directory)
        if any(known.get(rel) != recorded for rel, recorded in hashed.items()):
            write_marker(directory, {**known, **hashed})
