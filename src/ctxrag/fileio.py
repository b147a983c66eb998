"""Crash-safe file writes: write to a temp file in the same folder, fsync, rename."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so a reader sees the old or the new file, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, ensure_ascii=False, indent=1).encode("utf-8"))


def fsync_dir(directory: Path) -> None:
    """fsync a folder so a rename inside it survives a crash."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(directory: Path) -> None:
    """fsync every file under `directory`, then the folders."""
    for root, _dirs, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(root))


def remove_tree(directory: Path, attempts: int = 5) -> None:
    """Remove a folder that nobody else writes to any more (renamed away first), retrying a few times if a file
    still appeared in it; `OSError` naming the folder if it cannot be removed."""
    import shutil

    for _ in range(attempts):
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.lexists(directory):
            return
    shutil.rmtree(directory)  # the last try raises what stops it
