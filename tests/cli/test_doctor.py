"""`ctxrag doctor`: one finding per check, JSON too, exit 1 only when something is broken (real models, real build)."""
from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from ctxrag.cli.main import app


def test_doctor_reports_models_cache_models_and_the_llama_build() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    r = CliRunner().invoke(app, ["doctor", "--json"])
    findings = {f["check"]: f for f in json.loads(r.output)}
    assert {"ctxrag", "home", "models cache", "model 1.5b", "model 0.5b", "llama.cpp"} <= set(findings)
    assert "shared by every CTXRAG_HOME" in findings["models cache"]["message"]
    assert findings["llama.cpp"]["status"] == "ok", findings["llama.cpp"]
    assert r.exit_code == (1 if any(f["status"] == "FAIL" for f in findings.values()) else 0)
    plain = CliRunner().invoke(app, ["doctor"])
    assert "llama.cpp: llama-cpp-python" in plain.output


def test_doctor_fails_when_the_selected_model_path_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    monkeypatch.setenv("CTXRAG_LLM__MODEL_PATH", str(tmp_path / "missing.gguf"))
    r = CliRunner().invoke(app, ["doctor"])
    assert r.exit_code == 1 and "FAIL  model path" in r.output and "no such file" in r.output
