"""Stage 3 of BM25: the formulas. Okapi BM25, BM25+ and BM25L exactly as rank_bm25 0.2.2 computes them.

The index stores raw term frequencies and document lengths: idf depends on the whole vocabulary (Okapi's epsilon
floor uses the average idf of every term) and length normalisation on the average document length, and both change
with every add or delete. What is cached is split along that line: ``tf_part`` per posting (depends on avgdl only,
filled per column on first use and dropped when avgdl changes, see `weights`) and idf per term (recomputed after a
change), multiplied at query time. So incremental updates stay exact and a query does one multiply per posting.

>>> params = BM25Params.for_variant("okapi")
>>> idf = term_idf(np.array([1, 3]), n_docs=3, params=params)
>>> [round(float(x), 4) for x in idf]  # the negative idf is floored at 0.25 * mean idf
[0.5108, -0.1794]
"""
from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ctxrag.enums import ChoiceEnum
from ctxrag.errors import ConfigError


class BM25Variant(ChoiceEnum):
    """Which BM25 formula scores documents."""

    __label__ = "BM25 variant"
    __error__ = ConfigError
    __aliases__ = {"bm25": "okapi", "bm25okapi": "okapi", "bm25plus": "bm25+", "plus": "bm25+", "l": "bm25l"}

    OKAPI = "okapi"
    PLUS = "bm25+"
    L = "bm25l"


# rank_bm25's defaults per variant
_DEFAULT_DELTA = {BM25Variant.OKAPI: 0.0, BM25Variant.PLUS: 1.0, BM25Variant.L: 0.5}


class BM25Params(BaseModel):
    """BM25 parameters; the defaults are rank_bm25's."""

    model_config = ConfigDict(frozen=True)

    variant: BM25Variant = BM25Variant.OKAPI
    """Scoring formula."""
    k1: float = Field(1.5, ge=0)
    """Term-frequency saturation."""
    b: float = Field(0.75, ge=0, le=1)
    """Document-length normalisation strength."""
    epsilon: float = 0.25
    """Okapi only: a negative idf is replaced by ``epsilon * mean idf over all terms``."""
    delta: float = Field(0.0, ge=0)
    """BM25+ / BM25L only: the lower bound added to each matching term's frequency part."""

    @classmethod
    def for_variant(cls, variant: str | BM25Variant, **overrides: float | None) -> BM25Params:
        """Parameters for `variant` with rank_bm25's default delta unless given; ``None`` values are ignored."""
        v = BM25Variant.from_str(variant)
        values = {"variant": v, "delta": _DEFAULT_DELTA[v]}
        values.update({k: val for k, val in overrides.items() if val is not None})
        try:
            return cls(**values)
        except ValueError as exc:
            raise ConfigError(f"bad BM25 parameters {overrides}: {exc}") from None


def term_idf(df: np.ndarray, n_docs: int, params: BM25Params) -> np.ndarray:
    """idf of every term with ``df > 0`` (terms no live document contains must be left out by the caller)."""
    df = df.astype(np.float64)
    if params.variant is BM25Variant.OKAPI:
        idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        if len(idf):
            # the floor is computed over every term, negative ones included, as rank_bm25 does
            floor = params.epsilon * (idf.sum() / len(idf))
            idf = np.where(idf < 0, floor, idf)
        return idf
    if params.variant is BM25Variant.L:
        return np.log(n_docs + 1) - np.log(df + 0.5)
    return np.log((n_docs + 1) / df)


def length_norm(doc_len: np.ndarray, avgdl: float, params: BM25Params) -> np.ndarray:
    """Per-document length factor ``1 - b + b * len / avgdl`` (recomputed when avgdl changes)."""
    return 1 - params.b + params.b * doc_len / avgdl


def tf_part(tf: np.ndarray, norm: np.ndarray, params: BM25Params) -> np.ndarray:
    """The idf-free part of each posting's weight: ``posting_weights(tf, norm, idf) == idf * tf_part(tf, norm)``.

    It depends on the document lengths and the average length only, so an index can keep it per posting and
    recompute it when avgdl changes, multiplying by the query term's idf at query time.
    """
    tf = tf.astype(np.float64)
    k1 = params.k1
    if params.variant is BM25Variant.L:
        ctd = tf / norm
        return tf * (k1 + 1) * (ctd + params.delta) / (k1 + ctd + params.delta)
    return tf * (k1 + 1) / (tf + k1 * norm)  # Okapi and BM25+ share it (BM25+ adds idf * delta to every document)


def posting_weights(tf: np.ndarray, norm: np.ndarray, idf: float, params: BM25Params) -> np.ndarray:
    """Score contribution of one query term for the documents that contain it.

    `tf` are the term's frequencies in those documents and `norm` their ``length_norm``. For BM25+ the part every
    document gets whether it contains the term or not (``idf * delta``) is left out; see ``absent_term_score``.
    """
    return idf * tf_part(tf, norm, params)


def absent_term_score(idf: float, params: BM25Params) -> float:
    """What a document that does not contain the term still scores for it (BM25+ only, else 0)."""
    return idf * params.delta if params.variant is BM25Variant.PLUS else 0.0
