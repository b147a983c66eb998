"""Settings: the knowledge-base backend is `store`; the dense index of a local one is `dense_backend`, whose old name
`vector_store` is still read (argument, environment, config file) with a warning naming both names."""
from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ctxrag.settings import RENAMED_SETTINGS, Settings


@pytest.fixture(autouse=True)
def _no_outside_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("CTXRAG_CONFIG", "CTXRAG_VECTOR_STORE", "CTXRAG_DENSE_BACKEND", "CTXRAG_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CTXRAG_HOME", str(tmp_path / "home"))


def test_defaults_are_the_local_backend_with_faiss() -> None:
    s = Settings()
    assert (s.store, s.dense_backend) == ("local", "faiss")
    assert RENAMED_SETTINGS == {"vector_store": "dense_backend"} and "vector_store" not in Settings.model_fields


def test_the_new_name_reads_without_a_warning(monkeypatch: pytest.MonkeyPatch,
                                              recwarn: pytest.WarningsRecorder) -> None:
    monkeypatch.setenv("CTXRAG_DENSE_BACKEND", "chroma")
    assert Settings().dense_backend == "chroma" and Settings(dense_backend="milvus").dense_backend == "milvus"
    assert not [w for w in recwarn if "deprecated" in str(w.message)]


@pytest.mark.parametrize("where", ["argument", "environment", "config file"])
def test_the_old_name_is_read_with_a_warning_naming_both(where: str, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    kwargs = {}
    if where == "argument":
        kwargs = {"vector_store": "chroma"}
    elif where == "environment":
        monkeypatch.setenv("CTXRAG_VECTOR_STORE", "chroma")
    else:
        config = tmp_path / "config.toml"
        config.write_text('vector_store = "chroma"\n', encoding="utf-8")
        monkeypatch.setenv("CTXRAG_CONFIG", str(config))
    with pytest.warns(FutureWarning, match="'vector_store' \\(CTXRAG_VECTOR_STORE\\) is deprecated: use "
                                           "'dense_backend' \\(CTXRAG_DENSE_BACKEND\\)"):
        s = Settings(**kwargs)
    assert s.dense_backend == "chroma" and s.store == "local"  # still a local knowledge base, vectors in Chroma


def test_old_and_new_names_that_disagree_fail_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXRAG_VECTOR_STORE", "milvus")
    with pytest.warns(FutureWarning), pytest.raises(ValidationError, match="vector_store='milvus' and "
                                                                           "dense_backend='faiss' disagree"):
        Settings(dense_backend="faiss")
    with pytest.warns(FutureWarning):
        assert Settings(dense_backend="milvus").dense_backend == "milvus"  # the same value: no conflict


def test_a_bad_old_value_is_rejected_like_a_bad_new_one() -> None:
    with pytest.warns(FutureWarning), pytest.raises(ValidationError, match="dense_backend"):
        Settings(vector_store="qdrant")


def test_the_old_attribute_still_reads_with_a_warning() -> None:
    s = Settings(dense_backend="milvus")
    with pytest.warns(FutureWarning, match="Settings.vector_store is deprecated: use Settings.dense_backend"):
        assert s.vector_store == "milvus"
