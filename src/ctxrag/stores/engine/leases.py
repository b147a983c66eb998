"""Reader leases: a process that reads an index generation holds a lease on it, and clean-up keeps a generation (its
folder and every segment it lists) while any lease on it is alive.

A lease is one small file per reader and generation, ``readers/gen-000042.<pid>.<random>.lease`` in the knowledge
base folder, held with an exclusive `filelock.FileLock` (``flock`` on Unix, ``LockFileEx`` on Windows). The operating
system drops the lock when the process ends, ``kill -9`` included, so a lease never outlives its reader; clean-up
probes each lease file without waiting (`ReaderLeases.live`): a lock it gets belongs to a dead reader, and that file
is removed.

The race between a reader taking a lease and clean-up deleting the generation is closed by a retire mark, written by
clean-up (under the write lock) before it probes: ``readers/gen-000042.retired``.

* Clean-up: mark the generation retired, then probe its leases; delete it only when none is alive.
* Reader: take the lease, then check that the generation is neither retired nor gone (`ReaderLeases.take`); if it
  is, drop the lease and read the newer committed generation instead.

Either the reader's check comes after the mark (it sees it and moves on), or its lease was taken before the mark
and so before the probe (clean-up sees it and keeps the generation). A lease lives as long as any index object read
from its generation (`Lease.bind`), so a memory-mapped or not yet opened file of that generation stays on disk for
every search that may still use it.

Example::

    from pathlib import Path
    from ctxrag.stores.engine.leases import ReaderLeases
    leases = ReaderLeases(Path("/tmp/kb-demo"))
    lease = leases.take(3, exists=lambda: True)   # None when generation 3 is retired or gone
    leases.retire([3]); leases.live([3])          # {3: 1}: clean-up keeps generation 3
    lease.release()
"""
from __future__ import annotations

import logging
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path

import filelock

log = logging.getLogger(__name__)
READERS_DIR = "readers"
LEASE_SUFFIX = ".lease"
RETIRED_SUFFIX = ".retired"


def _gen_prefix(gen: int) -> str:
    return f"gen-{gen:06d}"


def _gen_of(name: str) -> int | None:
    head = name.split(".", 1)[0]
    return int(head[4:]) if head.startswith("gen-") and head[4:].isdigit() else None


def _lock(path: Path) -> filelock.FileLock:
    """A lock object of its own (no per-path singleton, shared by the threads of this process): ``flock`` locks
    belong to one open file, so a probe from this process conflicts with this process's own leases too. No soft
    fallback: a soft lock would outlive a killed reader."""
    return filelock.FileLock(str(path), timeout=0, thread_local=False, is_singleton=False, fallback_to_soft=False)


class Lease:
    """One reader's hold on one generation; `release` (or the end of every object it is bound to, or of the
    process) lets clean-up delete the generation."""

    def __init__(self, path: Path | None, gen: int, lock: filelock.FileLock | None) -> None:
        self.path = path
        """The lease file; None for a reader that could not write one (a read-only folder): it holds nothing."""
        self.generation = gen
        self._lock = lock
        self._guard = threading.Lock()
        self._holders = 0
        self.released = False

    def bind(self, objects: Iterable[object]) -> None:
        """Hold the lease until every one of `objects` (the index objects read from the generation) is garbage;
        released at once when none of them can be tracked."""
        for obj in objects:
            try:
                weakref.finalize(obj, self._drop)
            except TypeError:  # not weak-referenceable: cannot tell when it goes
                continue
            with self._guard:
                self._holders += 1
        with self._guard:
            unbound = self._holders == 0
        if unbound:
            self.release()

    def _drop(self) -> None:
        with self._guard:
            self._holders -= 1
            last = self._holders <= 0
        if last:
            self.release()

    def release(self) -> None:
        with self._guard:
            if self.released:
                return
            self.released = True
        if self._lock is None or self.path is None:
            return
        try:
            self._lock.release(force=True)
        finally:
            try:
                self.path.unlink(missing_ok=True)
            except OSError:  # the knowledge base folder is gone, or a probe holds it (Windows): clean-up removes it
                pass

    def __repr__(self) -> str:
        return f"Lease(generation={self.generation}, path={str(self.path)!r}, released={self.released})"


class ReaderLeases:
    """The reader leases and retire marks of the knowledge base folder `root` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dir = self.root / READERS_DIR
        self._warned = False

    def take(self, gen: int, *, exists: Callable[[], bool]) -> Lease | None:
        """A lease on generation `gen`, or None when clean-up has retired it or `exists()` says it is gone (read the
        newer committed generation then). `FileNotFoundError` when the knowledge base folder itself is gone."""
        path = self.dir / f"{_gen_prefix(gen)}.{os.getpid()}.{uuid.uuid4().hex[:12]}{LEASE_SUFFIX}"
        try:
            self.dir.mkdir(exist_ok=True)  # never the parents: a deleted knowledge base is not created again
            lock = _lock(path)
            lock.acquire()
        except PermissionError as e:  # a read-only knowledge base folder: read it as before leases
            if not self._warned:
                log.warning("%s: cannot take a reader lease (%s); a writer's clean-up may remove index files this "
                            "process still reads", self.dir, e)
                self._warned = True
            return Lease(None, gen, None)
        lease = Lease(path, gen, lock)
        if self.retired(gen) or not exists():
            lease.release()
            self._remove_if_recreated()
            return None
        return lease

    def _remove_if_recreated(self) -> None:
        """`filelock` creates a lock file's missing folders: when `kb delete` renamed the knowledge base away between
        this reader's ``mkdir`` and its lock, the lock made ``<kb>/readers`` again. Remove what it made, only while
        the folder holds nothing else (a live or newly created knowledge base always has its lock file and SQLite
        file there; ``rmdir`` removes only empty folders, so a lease or mark another process just wrote stays)."""
        try:
            if set(os.listdir(self.root)) - {READERS_DIR}:
                return
            os.rmdir(self.dir)
            os.rmdir(self.root)
        except OSError:  # gone already, not empty, or a new knowledge base is being created there: leave it
            pass

    def retired(self, gen: int) -> bool:
        return (self.dir / f"{_gen_prefix(gen)}{RETIRED_SUFFIX}").exists()

    def retire(self, gens: Iterable[int]) -> None:
        """Mark generations as leaving: no reader takes a new lease on them (caller holds the write lock)."""
        gens = list(gens)
        if not gens:
            return
        self.dir.mkdir(exist_ok=True)
        for gen in gens:
            (self.dir / f"{_gen_prefix(gen)}{RETIRED_SUFFIX}").touch()

    def live(self, gens: Iterable[int]) -> dict[int, int]:
        """Generation -> number of live leases, for the retired generations `gens` (only those are probed: a lease
        file of a generation that is not retired may be just created, not yet locked). Lease files of readers that
        are gone (ended without releasing, killed) are removed on the way."""
        wanted = set(gens)
        out: dict[int, int] = {}
        try:
            names = sorted(p.name for p in self.dir.iterdir() if p.name.endswith(LEASE_SUFFIX))
        except FileNotFoundError:
            return out
        for name in names:
            gen = _gen_of(name)
            if gen is None or gen not in wanted or not self.retired(gen):
                continue
            path = self.dir / name
            probe = _lock(path)
            try:
                probe.acquire()
            except filelock.Timeout:
                out[gen] = out.get(gen, 0) + 1
                continue
            except OSError:  # removed by its reader meanwhile
                continue
            try:  # nobody holds it: its reader is gone
                path.unlink(missing_ok=True)
            finally:
                probe.release(force=True)
        return out

    def forget(self, kept: Iterable[int]) -> None:
        """Remove retire marks of generations no longer kept (their folders are gone; caller holds the write
        lock)."""
        keep = set(kept)
        try:
            marks = [p for p in self.dir.iterdir() if p.name.endswith(RETIRED_SUFFIX)]
        except FileNotFoundError:
            return
        for p in marks:
            if _gen_of(p.name) not in keep:
                p.unlink(missing_ok=True)
