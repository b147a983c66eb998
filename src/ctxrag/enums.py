"""One base for ctxrag's string-valued option enums, so every option name parses the same way and fails the same way;
and the options that several layers share (`SearchMode`, `Reranker`), each spelled once here.

``Mode.from_str(" Relative-Score ")`` accepts the member itself, its value in any case, with ``-``, ``_`` or spaces
interchangeable, and the aliases a subclass lists; anything else raises an error naming the option, the bad value and
the choices. A subclass sets (as dunder attributes, so they do not become members):

- ``__label__``: what the option is called in messages (default: the class name);
- ``__aliases__``: extra spellings, ``{alias: value}`` (compared after the same normalisation);
- ``__error__``: the `ValueError` subclass to raise (default `ValueError`; e.g. `ConfigError` for settings);
- ``__field__``: the option's parameter name, when messages should start with it (``unit='bytes': unknown ...``).

It mixes in ``str`` (not `enum.StrEnum`, new in Python 3.11 while ctxrag supports 3.10): members compare equal to
their values and serialise as them, exactly as the enums it replaces did.

Example::

    from ctxrag.enums import ChoiceEnum

    class Color(ChoiceEnum):
        __label__ = "color"
        __aliases__ = {"crimson": "red"}
        RED = "red"
        DARK_BLUE = "dark_blue"

    Color.from_str("Dark-Blue")     # Color.DARK_BLUE
    Color.from_str("crimson")       # Color.RED
    Color.from_str("green")         # ValueError: unknown color 'green'; choose one of: red, dark_blue
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Any, TypeVar

from ctxrag.errors import ConfigError

E = TypeVar("E", bound="ChoiceEnum")

_SEPARATORS = re.compile(r"[\s_\-]+")


def _canonical(text: str) -> str:
    return _SEPARATORS.sub("", text.strip().lower())


class ChoiceEnum(str, Enum):
    """A string option with a fixed set of values; see the module docstring."""

    @classmethod
    def from_str(cls: type[E], value: Any) -> E:
        """The member `value` names (member, value, or alias); raises ``__error__`` naming the value and choices."""
        if isinstance(value, cls):
            return value
        key = _canonical(str(value))
        for member in cls:
            if _canonical(member.value) == key:
                return member
        aliases: dict[str, str] = getattr(cls, "__aliases__", {})
        for alias, target in aliases.items():
            if _canonical(alias) == key:
                return cls(target)
        label = getattr(cls, "__label__", cls.__name__)
        error: type[ValueError] = getattr(cls, "__error__", ValueError)
        field = getattr(cls, "__field__", None)
        what = f"{field}={value!r}: unknown {label}" if field else f"unknown {label} {value!r}"
        raise error(f"{what}; choose one of: {cls.choices_text()}")

    @classmethod
    def choices_text(cls) -> str:
        """The values, comma separated, as error messages and help texts show them."""
        return ", ".join(m.value for m in cls)


class SearchMode(ChoiceEnum):
    """How a retriever finds chunks: the one spelling of the search mode for the factory, the knowledge base, the CLI,
    the server and the evaluation. Each member has its row (help, index kinds, builder) in
    `ctxrag.retrievers.modes.MODES`."""

    __label__ = "search mode"
    __error__ = ConfigError

    DENSE = "dense"
    BM25 = "bm25"
    HYBRID = "hybrid"
    GRAPH = "graph"
    MILVUS_HYBRID = "milvus_hybrid"
    HEADINGS = "headings"
    DOCUMENT = "document"


class Reranker(ChoiceEnum):
    """Which reranker runs after retrieval (`ctxrag.compressors.build_reranker`): the one spelling for the factory,
    the CLI, the server and the evaluation."""

    __label__ = "reranker"
    __error__ = ConfigError

    NONE = "none"
    JINA = "jina"
    LLM = "llm"
