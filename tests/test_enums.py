"""`ChoiceEnum.from_str`: every spelling it accepts, and the error it raises, for a local enum and for each enum that
uses it (the modules keep their own tests of their names and messages)."""
from __future__ import annotations

import pytest

from ctxrag.compressors.llm_rerank import PointwiseScoring, RerankMode
from ctxrag.chains.router import Route
from ctxrag.enums import ChoiceEnum, Reranker, SearchMode
from ctxrag.errors import ConfigError
from ctxrag.indexing.placement import ContextPlacement
from ctxrag.indexing.contexts.strategies import ContextStrategy
from ctxrag.loading.splitter import SplitMode, SplitUnit
from ctxrag.stores.bm25.scoring import BM25Variant
from ctxrag.retrievers.fusion import FusionMode
from ctxrag.retrievers.graph import GraphRerank


class Color(ChoiceEnum):
    __label__ = "color"
    __aliases__ = {"crimson": "red"}

    RED = "red"
    DARK_BLUE = "dark_blue"


class Size(ChoiceEnum):
    __error__ = ConfigError

    SMALL = "small"


def test_members_values_and_aliases() -> None:
    assert Color.from_str(Color.RED) is Color.RED
    for spelling in ("dark_blue", "Dark-Blue", " dark blue ", "DARK_BLUE"):
        assert Color.from_str(spelling) is Color.DARK_BLUE
    assert Color.from_str("Crimson") is Color.RED
    assert Color.RED == "red" and [c.value for c in Color] == ["red", "dark_blue"]  # dunders are not members


def test_error_names_label_value_and_choices() -> None:
    with pytest.raises(ValueError, match=r"^unknown color 'green'; choose one of: red, dark_blue$"):
        Color.from_str("green")
    with pytest.raises(ConfigError, match=r"^unknown Size 'huge'; choose one of: small$"):
        Size.from_str("huge")


ENUMS = [RerankMode, PointwiseScoring, Route, SearchMode, Reranker, ContextPlacement, ContextStrategy, SplitMode, SplitUnit,
         BM25Variant, FusionMode, GraphRerank]


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.__name__)
def test_every_option_enum_uses_the_base(enum: type[ChoiceEnum]) -> None:
    assert issubclass(enum, ChoiceEnum)
    for member in enum:
        assert enum.from_str(member.value.upper()) is member
    with pytest.raises(ValueError, match=r"'no-such-choice'.*; choose one of: " + ", ".join(m.value for m in enum).replace("+", r"\+")):
        enum.from_str("no-such-choice")


@pytest.mark.parametrize("enum", [ContextPlacement, SplitMode, SplitUnit, BM25Variant], ids=lambda e: e.__name__)
def test_settings_enums_raise_config_error(enum: type[ChoiceEnum]) -> None:
    with pytest.raises(ConfigError):
        enum.from_str("no-such-choice")


def test_aliases_kept() -> None:
    assert BM25Variant.from_str("BM25Plus") is BM25Variant.PLUS and BM25Variant.from_str("bm25") is BM25Variant.OKAPI
    assert FusionMode.from_str("Reciprocal-Rank-Fusion") is FusionMode.RRF
    assert FusionMode.from_str("distribution_based_rank_fusion") is FusionMode.DBSF
    assert Route.from_str(" No-Knowledge ") is Route.NO_KNOWLEDGE


def test_field_prefix() -> None:
    with pytest.raises(ConfigError, match=r"^unit='bytes': unknown split unit; choose one of: chars, tokens$"):
        SplitUnit.from_str("bytes")
