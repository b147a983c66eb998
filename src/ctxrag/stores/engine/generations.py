"""Index generations of one knowledge base folder: the inter-process write lock, the checksummed manifest, writing a
generation atomically, verifying it on load, and cleaning up old ones.

Layout under the knowledge base folder::

    write.lock              the inter-process write lock (`filelock`); held from reading the current generation
    write.lock.holder       JSON: pid, host, command and time of the process holding it (for messages)
    readers/                reader leases (one locked file per reader and generation) and retire marks
    indexes/gen-000042/     one committed generation: a folder per index plus manifest.json
    indexes/format.json     the generation format: every generation has a manifest (see `manifests_required`)
    indexes/.tmp-gen-...    a generation being written (renamed to gen-N when complete; never read)

Rules (see docs/reliability.md):

* Only a holder of the write lock writes or deletes anything under ``indexes/``; readers never delete.
* A generation is written under a temporary name, fsynced, renamed into place, and only then recorded as current
  in SQLite by the caller; so a crash leaves the previous generation current and intact.
* Clean-up (under the lock) keeps the current generation, the one before it, and every generation a live reader
  holds a lease on (``readers/``, `ctxrag.stores.engine.leases`); it removes older ones, temporary folders of dead
  writers and folders newer than current (uncommitted), then the segment folders under ``indexes/segments/`` that no
  kept generation lists. A lease dies with its process (``kill -9`` included), so a later clean-up removes what it
  kept.
* FAISS and BM25 are segmented (`ctxrag.stores.engine.segments`): a generation folder holds their ``segments.json`` (the
  segment list with each segment file's size and sha256, and the tombstones); a commit writes only its new segment.
* ``manifest.json`` records size and sha256 of every file; `verify` checks them before an index is loaded, so a
  damaged file is an error naming it, never silently different results.

Example::

    from pathlib import Path
    from ctxrag.stores.engine.generations import GenerationStore
    gens = GenerationStore(Path("/tmp/kb-demo"), "demo")
    with gens.write_lock():
        pass                                   # read the current generation, write the next, commit SQLite
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import filelock

from ctxrag.errors import IndexCorruptError, KnowledgeBaseDeleted, KnowledgeBaseLocked
from ctxrag.fileio import atomic_write_json, fsync_dir, fsync_tree
from ctxrag.stores.engine.leases import Lease, ReaderLeases
from ctxrag.stores.engine.segment_checksums import file_sha256
from ctxrag.stores.engine.segments import SEGMENTS_DIR, SET_FILE, referenced_segments

log = logging.getLogger(__name__)

LOCK_FILE = "write.lock"
HOLDER_FILE = "write.lock.holder"
INDEXES_DIR = "indexes"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "ctxrag-generation"
MANIFEST_VERSION = 1
FORMAT_FILE = "format.json"
"""``indexes/format.json``: written with the first generation that has a manifest; from then on a generation without
its manifest is damage, not a generation that predates manifests."""
KEEP_PREVIOUS = 1
"""Generations kept before the current one: a reader that read the generation number just before a commit may still
be loading the previous one."""
_TMP_PREFIX = ".tmp-gen-"
_WAIT_NOTICE_S = 1.0


class SavableIndex(Protocol):
    def save(self, directory: Path) -> None: ...


__all__ = ["GenerationStore", "file_sha256", "gen_name", "parse_gen"]


def gen_name(gen: int) -> str:
    return f"gen-{gen:06d}"


def parse_gen(name: str) -> int | None:
    """The number of a committed generation folder name (``gen-000042`` -> 42), else None."""
    if name.startswith("gen-") and name[4:].isdigit():
        return int(name[4:])
    return None


class GenerationStore:
    """The generations of the knowledge base in `root` (named `kb_name` in messages).

    `lock_timeout` is how long `write_lock` waits for another writer before raising `KnowledgeBaseLocked`.
    """

    def __init__(self, root: Path, kb_name: str, *, lock_timeout: float = 600.0) -> None:
        if lock_timeout < 0:
            raise ValueError(f"lock_timeout must be >= 0 seconds, got {lock_timeout}")
        self.root = Path(root)
        self.kb_name = kb_name
        self.lock_timeout = lock_timeout
        self.base = self.root / INDEXES_DIR
        self._lock = filelock.FileLock(str(self.root / LOCK_FILE))
        self.leases = ReaderLeases(self.root)
        """Reader leases: clean-up keeps every generation a live reader holds."""

    # -- paths --------------------------------------------------------------------------
    def gen_dir(self, gen: int) -> Path:
        return self.base / gen_name(gen)

    @property
    def segments_dir(self) -> Path:
        """``indexes/segments``: the immutable segment folders generations share (`ctxrag.stores.engine.segments`)."""
        return self.base / SEGMENTS_DIR

    def committed(self) -> list[int]:
        """Numbers of the generation folders present (committed or left by a crash after the rename)."""
        if not self.base.is_dir():
            return []
        return sorted(n for p in self.base.iterdir() if (n := parse_gen(p.name)) is not None)

    def repair_hint(self) -> str:
        return f"run `ctxrag kb repair {self.kb_name}` to rebuild it from the document store"

    # -- the write lock -----------------------------------------------------------------
    @property
    def is_locked_here(self) -> bool:
        return bool(self._lock.is_locked)

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """Hold the inter-process write lock (re-entrant in one thread). A writer that has to wait says so on the
        log (stderr for the CLI); after `lock_timeout` seconds `KnowledgeBaseLocked` names the holder."""
        self.root.mkdir(parents=True, exist_ok=True)
        nested = self._lock.is_locked
        start = time.monotonic()
        try:
            self._acquire(min(_WAIT_NOTICE_S, self.lock_timeout))
        except filelock.Timeout:
            log.warning("knowledge base %r: waiting for the write lock (%s), held by %s", self.kb_name,
                        self.root / LOCK_FILE, self.holder_description())
            remaining = max(0.0, self.lock_timeout - (time.monotonic() - start))
            try:
                self._acquire(remaining)
            except filelock.Timeout:
                raise KnowledgeBaseLocked(
                    f"knowledge base {self.kb_name!r} is locked for writing by {self.holder_description()} "
                    f"(waited {self.lock_timeout:.0f} s on {self.root / LOCK_FILE}); try again when it has finished, "
                    f"or raise CTXRAG_WRITE_LOCK_TIMEOUT"
                ) from None
            log.warning("knowledge base %r: got the write lock after %.1f s", self.kb_name, time.monotonic() - start)
        try:
            if not nested:
                self._write_holder()
            yield
        finally:
            self._lock.release()

    def _acquire(self, timeout: float) -> None:
        try:
            self._lock.acquire(timeout=timeout)
        except FileNotFoundError:  # `kb delete` renamed the folder away while we waited
            if self.root.is_dir():
                raise
            raise KnowledgeBaseDeleted(self.kb_name, "by another process while this one waited for its write lock; "
                                                     "nothing was written") from None

    def _write_holder(self) -> None:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)[:300],
                "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            (self.root / HOLDER_FILE).write_text(json.dumps(info), encoding="utf-8")
        except OSError:  # only used for messages
            pass

    def holder(self) -> dict[str, Any] | None:
        try:
            info = json.loads((self.root / HOLDER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None

    def holder_description(self) -> str:
        info = self.holder()
        if not info:
            return "another process"
        return (f"pid {info.get('pid')} on {info.get('host')} ({info.get('command') or '?'}) "
                f"since {info.get('since')}")

    def remove_lock_leftovers(self) -> None:
        """After the knowledge base was deleted under a writer waiting for its lock (the wait creates the lock file,
        and its folder, again): remove them when nothing else is in the folder. Caller holds the write lock."""
        try:
            if not {p.name for p in self.root.iterdir()} <= {LOCK_FILE, HOLDER_FILE}:
                return
            (self.root / HOLDER_FILE).unlink(missing_ok=True)
            (self.root / LOCK_FILE).unlink(missing_ok=True)
            self.root.rmdir()
        except OSError:  # another writer is creating the knowledge base again: leave it alone
            pass

    # -- writing --------------------------------------------------------------------------
    def write(self, gen: int, indexes: Mapping[str, SavableIndex]) -> Path:
        """Write every index as generation `gen` (caller holds the write lock) and return its folder.

        The files go into a temporary folder that is fsynced and renamed to ``gen-N`` only when complete, with a
        manifest of each file's size and sha256. The caller then records `gen` as current in SQLite."""
        self._require_lock("write a generation")
        self.base.mkdir(parents=True, exist_ok=True)
        tmp = self.base / f"{_TMP_PREFIX}{gen:06d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            manifest: dict[str, Any] = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "generation": gen,
                                        "written": time.time(), "indexes": {}}
            for name, index in indexes.items():
                d = tmp / name
                d.mkdir(parents=True, exist_ok=True)
                save_segments = getattr(index, "save_segments", None)
                if save_segments is not None:  # only the new segment is written; the list names the others
                    save_segments(d, self.segments_dir, generation=gen)
                else:
                    index.save(d)
                manifest["indexes"][name] = {
                    "type": type(index).__name__,
                    "files": {p.relative_to(d).as_posix(): {"size": p.stat().st_size, "sha256": file_sha256(p)}
                              for p in sorted(d.rglob("*")) if p.is_file()},
                }
            atomic_write_json(tmp / MANIFEST_FILE, manifest)
            fsync_tree(tmp)
            if not (self.base / FORMAT_FILE).exists():
                atomic_write_json(self.base / FORMAT_FILE, {"format": MANIFEST_FORMAT, "manifest_version":
                                                            MANIFEST_VERSION, "manifests": "required"})
            final = self.gen_dir(gen)
            if final.exists():  # left by a writer that died after its rename, before its SQLite commit
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_dir(self.base)
            return final
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def clean(self, current: int) -> list[Path]:
        """Remove generations older than the current one and its predecessor unless a reader holds a lease on them
        (`ctxrag.stores.engine.leases`), generations newer than current (never committed) and temporary folders (their
        writers are gone: only the lock holder writes), then the segments no kept generation lists. Caller holds
        the write lock. Returns what was removed; a generation kept for a reader goes at a later clean-up."""
        self._require_lock("clean up generations")
        if not self.base.is_dir():
            return []
        old = [n for n in self.committed() if n < current - KEEP_PREVIOUS]
        self.leases.retire(old)  # before the probe: a reader that leases it after the probe sees the mark
        leased = self.leases.live(old)
        removed = []
        for p in self.base.iterdir():
            n = parse_gen(p.name)
            stale = p.name.startswith(_TMP_PREFIX) or (n is not None and (
                n > current or (n < current - KEEP_PREVIOUS and n not in leased)))
            if stale:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
        removed += self._clean_segments()
        self.leases.forget(self.committed())
        return removed

    def lease(self, gen: int) -> Lease | None:
        """A reader's lease on committed generation `gen` (see `ctxrag.stores.engine.leases`); None when clean-up has
        retired or removed it meanwhile (read the newer one)."""
        return self.leases.take(gen, exists=self.gen_dir(gen).is_dir)

    def _clean_segments(self) -> list[Path]:
        """Remove segment folders no kept generation lists (and temporary ones of dead writers). Generations a
        reader holds a lease on are kept, so every segment such a reader may still open stays."""
        if not self.segments_dir.is_dir():
            return []
        kept: set[str] = set()
        for n in self.committed():
            for index_dir in self.gen_dir(n).iterdir():
                if index_dir.is_dir():
                    kept |= referenced_segments(index_dir)
        removed = []
        for p in self.segments_dir.iterdir():
            if p.name not in kept:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
        return removed

    def _require_lock(self, what: str) -> None:
        if not self._lock.is_locked:
            raise RuntimeError(f"knowledge base {self.kb_name!r}: must hold the write lock to {what}")

    # -- reading ----------------------------------------------------------------------------
    def manifest(self, gen: int) -> dict[str, Any] | None:
        """The manifest of generation `gen`; None for a generation written before manifests existed. A missing
        manifest where `manifests_required` is `IndexCorruptError`."""
        path = self.gen_dir(gen) / MANIFEST_FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            if not self.gen_dir(gen).is_dir():
                raise IndexCorruptError(
                    f"{self.gen_dir(gen)}: the current index generation of knowledge base {self.kb_name!r} is "
                    f"missing; {self.repair_hint()}") from None
            if self.manifests_required(gen):
                raise IndexCorruptError(
                    f"{path}: the generation manifest is missing (this knowledge base writes one with every "
                    f"generation, so its files cannot be verified: damaged); {self.repair_hint()}") from None
            return None
        except (OSError, ValueError) as e:
            raise IndexCorruptError(f"{path}: unreadable generation manifest ({e}); {self.repair_hint()}") from None
        if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT or not isinstance(doc.get("indexes"), dict):
            raise IndexCorruptError(f"{path}: not a {MANIFEST_FORMAT} manifest; {self.repair_hint()}")
        return doc

    def manifests_required(self, gen: int) -> bool:
        """True when generation `gen` must have a manifest: ``indexes/format.json`` says so, another generation has
        one (written by a version that had manifests, before format.json existed), or it holds a segment list
        (segments came after manifests: every version that writes a list writes a manifest that checksums it)."""
        if (self.base / FORMAT_FILE).exists():
            return True
        if any((d / SET_FILE).exists() for d in self.gen_dir(gen).iterdir() if d.is_dir()):
            return True
        return any(n != gen and (self.gen_dir(n) / MANIFEST_FILE).exists() for n in self.committed())

    def verify(self, gen: int, name: str, manifest: Mapping[str, Any] | None) -> bool:
        """Check the files of index `name` in generation `gen` against the manifest (size, then sha256).

        Returns False when the manifest does not list the index (a kind enabled since: rebuild it), True when every
        file matches; raises `IndexCorruptError` naming the first damaged file otherwise."""
        if manifest is None:
            return (self.gen_dir(gen) / name).is_dir()  # legacy generation: no checksums to compare
        entry = manifest["indexes"].get(name)
        if entry is None:
            return False
        d = self.gen_dir(gen) / name
        for rel, want in entry.get("files", {}).items():
            p = d / rel
            try:
                size = p.stat().st_size
            except FileNotFoundError:
                raise IndexCorruptError(f"{p}: index file is missing; {self.repair_hint()}") from None
            if size != want.get("size"):
                raise IndexCorruptError(
                    f"{p}: index file has {size} bytes, the manifest says {want.get('size')}; {self.repair_hint()}")
            if file_sha256(p) != want.get("sha256"):
                raise IndexCorruptError(f"{p}: index file checksum does not match the manifest (damaged in place); "
                                        f"{self.repair_hint()}")
        return True
