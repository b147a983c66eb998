"""Experiment configurations: which retrieval setup to evaluate, by built-in name, YAML file or Python.

Built-in names: ``dense``, ``bm25``, ``hybrid``, ``hybrid-rerank-llm``, ``hybrid-rerank-jina``, ``graph``; prefix any
with ``contextual-`` (or give ``--contexts FILE``) to index ``context + "\\n\\n" + chunk`` instead of the chunk.

YAML holds one mapping, a list of mappings, or ``{configs: [...]}``; each mapping has the fields of `ExperimentConfig`
and may start from a built-in with ``base: hybrid``.

Example::

    from ctxrag.evaluation.experiments import ExperimentConfig, resolve_config
    resolve_config("contextual-hybrid").retrieval     # SearchMode.HYBRID
    ExperimentConfig(name="mine", retrieval=SearchMode.HYBRID, weights=[0.7, 0.3], rerank=Reranker.LLM, rerank_pool=40)

A configuration is run as ``make_retriever(source, mode=retrieval, k=..., fusion=..., weights=..., c=...,
rerank=..., rerank_pool=...)`` (`ctxrag.retrievers.factory`): the retriever ``kb.as_retriever`` builds with the same
options, candidate depths included.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ctxrag.enums import Reranker, SearchMode
from ctxrag.errors import ConfigError, LoadError
from ctxrag.retrievers.fusion import FusionMode


class ExperimentConfig(BaseModel):
    """One retrieval setup to evaluate.

    Example::

        ExperimentConfig(name="hybrid-0.7", retrieval=SearchMode.HYBRID, weights=[0.7, 0.3])
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    retrieval: SearchMode = SearchMode.DENSE
    contextual: bool = False
    """Index chunks with their contexts prepended (contexts from ``contexts_file`` or the dataset's own)."""
    contexts_file: Path | None = None
    fusion: str = "auto"
    """Fusion mode for hybrid: auto (the library default per query language), rrf, relative_score, dbsf."""
    weights: list[float] | None = None
    """Hybrid weights, [dense, bm25]; None: equal."""
    c: float = 60
    """RRF rank constant."""
    document_weight: float | None = Field(default=None, ge=0)
    """Mode ``document``: weight of the document's rank (None: the factory's default)."""
    rerank: Reranker = Reranker.NONE
    rerank_pool: int | None = Field(default=None, ge=1)
    """How many fused candidates go to the reranker (at least the deepest cut-off); None: the factory's default
    (`ctxrag.retrievers.factory.RERANK_POOL`)."""

    @field_validator("retrieval", mode="before")
    @classmethod
    def _retrieval(cls, v: Any) -> SearchMode:
        return SearchMode.from_str(v)

    @field_validator("rerank", mode="before")
    @classmethod
    def _rerank(cls, v: Any) -> Reranker:
        return Reranker.from_str("none" if v in (None, False) else v)

    @field_validator("fusion")
    @classmethod
    def _fusion(cls, v: str) -> str:
        return "auto" if str(v).strip().lower() == "auto" else FusionMode.from_str(v).value

    @model_validator(mode="after")
    def _check(self) -> ExperimentConfig:
        if self.contexts_file is not None:
            self.contextual = True
        if self.weights is not None and self.retrieval is SearchMode.HYBRID and len(self.weights) != 2:
            raise ValueError(f"hybrid weights must be [dense, bm25], got {self.weights}")
        return self

    def contextualized(self, contexts_file: Path | None = None) -> ExperimentConfig:
        """The same setup over contextualized chunks (name prefixed ``contextual-``)."""
        name = self.name if self.contextual else f"contextual-{self.name}"
        return self.model_copy(update={"name": name, "contextual": True,
                                       "contexts_file": contexts_file or self.contexts_file})


BUILTINS: dict[str, ExperimentConfig] = {
    c.name: c
    for c in [
        ExperimentConfig(name="dense", retrieval=SearchMode.DENSE),
        ExperimentConfig(name="bm25", retrieval=SearchMode.BM25),
        ExperimentConfig(name="hybrid", retrieval=SearchMode.HYBRID),
        ExperimentConfig(name="hybrid-rerank-llm", retrieval=SearchMode.HYBRID, rerank=Reranker.LLM),
        ExperimentConfig(name="hybrid-rerank-jina", retrieval=SearchMode.HYBRID, rerank=Reranker.JINA),
        ExperimentConfig(name="graph", retrieval=SearchMode.GRAPH),
    ]
}

ANTHROPIC_DEFAULTS = ("dense", "bm25", "hybrid", "contextual-dense", "contextual-bm25", "contextual-hybrid")
"""What ``ctxrag eval retrieval --format anthropic`` runs when no --config is given."""


def builtin(name: str) -> ExperimentConfig:
    """A built-in config; ``contextual-NAME`` gives its contextual variant."""
    key = name.strip().lower()
    contextual = key.startswith("contextual-")
    base = key[len("contextual-"):] if contextual else key
    if base not in BUILTINS:
        names = ", ".join(list(BUILTINS) + ["contextual-<name>"])
        raise ConfigError(f"unknown config {name!r}: not a built-in ({names}) nor an existing YAML file")
    cfg = BUILTINS[base]
    return cfg.contextualized() if contextual else cfg


def _from_mapping(data: Any, where: str) -> ExperimentConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of config fields, got {type(data).__name__}")
    data = dict(data)
    base = data.pop("base", None)
    try:
        if base is not None:
            start = builtin(str(base)).model_dump()
            start.update(data)
            return ExperimentConfig(**start)
        return ExperimentConfig(**data)
    except ValidationError as e:
        detail = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'config'}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"{where}: {detail}") from None


def load_configs(path: str | Path) -> list[ExperimentConfig]:
    """Configs from a YAML file (one mapping, a list, or ``{configs: [...]}``)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LoadError(path, "no such file") from None
    except yaml.YAMLError as e:
        raise LoadError(path, f"invalid YAML: {e}") from None
    if isinstance(data, dict) and "configs" in data:
        data = data["configs"]
    items = data if isinstance(data, list) else [data]
    if not items or items == [None]:
        raise LoadError(path, "no configurations in the file")
    return [_from_mapping(item, f"{path} item {i}") for i, item in enumerate(items)]


def resolve_config(spec: str | Path | ExperimentConfig | dict[str, Any]) -> list[ExperimentConfig]:
    """A built-in name, a YAML path, a dict or a config -> list of configs."""
    if isinstance(spec, ExperimentConfig):
        return [spec]
    if isinstance(spec, dict):
        return [_from_mapping(spec, "config")]
    text = str(spec)
    if text.endswith((".yaml", ".yml")) or Path(text).is_file():
        return load_configs(text)
    return [builtin(text)]


def resolve_configs(specs: list[Any], contexts_file: Path | None = None) -> list[ExperimentConfig]:
    """Resolve every spec; with ``contexts_file`` every config becomes contextual over that file."""
    out: list[ExperimentConfig] = []
    for spec in specs:
        for cfg in resolve_config(spec):
            out.append(cfg.contextualized(contexts_file) if contexts_file is not None else cfg)
    names = [c.name for c in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"config names must be unique, repeated: {dupes}")
    if not out:
        raise ConfigError("no configurations to run")
    return out
