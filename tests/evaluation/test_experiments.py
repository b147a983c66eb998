from __future__ import annotations

from pathlib import Path

import pytest

from ctxrag.errors import ConfigError, LoadError
from ctxrag.enums import Reranker, SearchMode
from ctxrag.evaluation.experiments import (
    ANTHROPIC_DEFAULTS,
    BUILTINS,
    ExperimentConfig,
    builtin,
    load_configs,
    resolve_configs,
)


def test_builtins_and_contextual_prefix() -> None:
    assert set(BUILTINS) == {"dense", "bm25", "hybrid", "hybrid-rerank-llm", "hybrid-rerank-jina", "graph"}
    assert builtin("hybrid-rerank-llm").rerank is Reranker.LLM
    c = builtin("contextual-hybrid")
    assert c.contextual and c.retrieval is SearchMode.HYBRID and c.name == "contextual-hybrid"
    assert [x.name for x in resolve_configs(list(ANTHROPIC_DEFAULTS))] == list(ANTHROPIC_DEFAULTS)
    with pytest.raises(ConfigError, match="unknown config 'dnse'"):
        builtin("dnse")


def test_contexts_file_makes_every_config_contextual(tmp_path: Path) -> None:
    f = tmp_path / "ctx.jsonl"
    configs = resolve_configs(["dense", "bm25"], contexts_file=f)
    assert [c.name for c in configs] == ["contextual-dense", "contextual-bm25"]
    assert all(c.contextual and c.contexts_file == f for c in configs)


def test_yaml_configs(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "configs:\n"
        "  - name: hyb-7-3\n    base: hybrid\n    weights: [0.7, 0.3]\n    fusion: dbsf\n"
        "  - {name: wide-rerank, base: hybrid-rerank-llm, rerank_pool: 100}\n"
    )
    a, b = load_configs(path)
    assert a.retrieval is SearchMode.HYBRID and a.weights == [0.7, 0.3] and a.fusion == "dbsf"
    assert b.rerank_pool == 100 and b.rerank is Reranker.LLM
    single = tmp_path / "one.yml"
    single.write_text("name: x\nretrieval: bm25\n")
    assert resolve_configs([str(single), "dense"])[0].retrieval is SearchMode.BM25


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown search mode 'sparse'"):
        ExperimentConfig(name="x", retrieval="sparse")
    with pytest.raises(ValueError, match="unknown fusion mode"):
        ExperimentConfig(name="x", fusion="borda")
    with pytest.raises(ValueError, match=r"\[dense, bm25\]"):
        ExperimentConfig(name="x", retrieval="hybrid", weights=[1, 2, 3])
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: x\n  retrieval: dense\n  colour: red\n")
    with pytest.raises(ConfigError, match="bad.yaml item 0.*colour"):
        load_configs(bad)
    bad.write_text("name: [unclosed\n")
    with pytest.raises(LoadError, match="invalid YAML"):
        load_configs(bad)
    with pytest.raises(LoadError, match="no such file"):
        load_configs(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="repeated"):
        resolve_configs(["dense", "dense"])


def test_hybrid_fusion_defaults_to_the_library_default_per_language():
    assert ExperimentConfig(name="h", retrieval="hybrid").fusion == "auto"
    assert ExperimentConfig(name="h", retrieval="hybrid", fusion="AUTO").fusion == "auto"
    assert ExperimentConfig(name="h", retrieval="hybrid", fusion="rsf").fusion == "relative_score"
