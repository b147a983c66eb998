"""On-disk form of a BM25 index: a JSON manifest and one uncompressed ``.npz`` of arrays, never pickle.

``np.load`` cannot memory-map members of an ``.npz``; because we write the archive uncompressed, each member is a
plain ``.npy`` at a known offset inside the zip, so `load_arrays` maps it in place with ``np.memmap`` and loading a
large index costs only the page faults of the columns a query touches.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "a.npz"
>>> save_arrays(path, {"x": np.arange(3)})
>>> load_arrays(path, ["x"])["x"].tolist()
[0, 1, 2]
"""
from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ctxrag.errors import IndexCorruptError
from ctxrag.stores.engine.mapped import advise_huge_pages

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zip local file header, fixed part (30 bytes)


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` as an uncompressed .npz (uncompressed so members can be memory-mapped on load)."""
    with open(path, "wb") as fh:
        np.savez(fh, **{name: np.ascontiguousarray(a) for name, a in arrays.items()})


def load_arrays(path: Path, names: list[str], *, mmap: bool = True) -> dict[str, np.ndarray]:
    """Read the arrays `names` from an .npz written by `save_arrays`, memory-mapped (read-only) when `mmap`.

    Raises `IndexCorruptError` naming the file and member if the archive is truncated, unreadable or lacks a member.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}
            out: dict[str, np.ndarray] = {}
            with open(path, "rb") as raw:
                for name in names:
                    info = members.get(f"{name}.npy")
                    if info is None:
                        raise IndexCorruptError(f"{path}: array {name!r} is missing")
                    if mmap and info.compress_type == zipfile.ZIP_STORED:
                        out[name] = _map_member(path, raw, info)
                    else:
                        with archive.open(info) as member:
                            out[name] = np.lib.format.read_array(member, allow_pickle=False)
            if mmap and any(isinstance(a.base, np.memmap) for a in out.values()):
                advise_huge_pages(path)
            return out
    except IndexCorruptError:
        raise
    except FileNotFoundError:
        raise IndexCorruptError(f"{path}: file is missing") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, struct.error) as exc:
        raise IndexCorruptError(f"{path}: not a readable .npz archive ({exc})") from None


def _map_member(path: Path, raw: Any, info: zipfile.ZipInfo) -> np.ndarray:
    raw.seek(info.header_offset)
    header = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
    if header[0] != b"PK\x03\x04":
        raise IndexCorruptError(f"{path}: bad zip header for {info.filename}")
    name_len, extra_len = header[-2], header[-1]
    data_start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    raw.seek(data_start)
    version = np.lib.format.read_magic(raw)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(raw)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(raw)
    else:
        raise IndexCorruptError(f"{path}: {info.filename} has unsupported .npy version {version}")
    if dtype.hasobject:
        raise IndexCorruptError(f"{path}: {info.filename} holds Python objects; refusing to load")
    offset = raw.tell()
    n_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if offset + n_bytes > data_start + info.file_size:
        raise IndexCorruptError(f"{path}: {info.filename} is shorter than its header says")
    if n_bytes == 0:
        return np.zeros(shape, dtype=dtype)
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")
    # a plain ndarray over the mapping (it keeps the map alive as its base): slicing a `np.memmap` runs Python code
    # (`__getitem__`, `__array_finalize__`) on every slice, and a query slices each term's postings per block
    return mapped.view(np.ndarray)


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    path.write_text(json.dumps(manifest, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def read_manifest(path: Path, expected_format: str) -> dict[str, Any]:
    """Parse the JSON manifest; `IndexCorruptError` if it is missing, truncated or of another format."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexCorruptError(f"{path}: index manifest is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexCorruptError(f"{path}: index manifest is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != expected_format:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise IndexCorruptError(f"{path}: expected format {expected_format!r}, found {found!r}")
    return manifest
