"""`ctxrag.fileio`: an atomic write replaces the file whole, and a failed one leaves the old file and no temp file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxrag.fileio import atomic_write_bytes, atomic_write_json, fsync_tree


def test_atomic_write_replaces_and_creates_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "x.json"
    atomic_write_json(target, {"名": 1})
    atomic_write_json(target, {"名": 2})
    assert json.loads(target.read_text(encoding="utf-8")) == {"名": 2}
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]
    fsync_tree(tmp_path)  # every file and folder, no error


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "w" / "x.bin"
    atomic_write_bytes(target, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]  # fails inside the write, after the temp file
    assert target.read_bytes() == b"old"
    assert [p.name for p in target.parent.iterdir()] == ["x.bin"]
