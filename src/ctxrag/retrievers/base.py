"""The retriever contract every ctxrag retriever follows: ``k`` and ``filter`` in the constructor and per call.

LangChain's `BaseRetriever.invoke(query, config, **kwargs)` hands ``kwargs`` to ``_get_relevant_documents`` only when
its signature accepts more than ``query`` and ``run_manager``; a retriever whose hook takes none drops them silently.
`CtxragRetriever` takes ``**kwargs`` and checks them, so:

- ``k`` is the one name for the number of documents returned, everywhere in ctxrag (the old ``top_k``/``top_n`` of
  the fusion and pipeline retrievers are gone: passing them raises `ValueError`, like any unknown name);
- ``filter`` restricts results by metadata: a dict ``{key: value}`` or ``{key: [allowed values]}`` (all keys must
  match), or a predicate over the metadata dict (`ctxrag.stores.filters`, the one filter language of the local and
  Milvus stores). It is applied inside the index, before the top-k cut, so a filtered query returns k documents when
  k match. A per-call filter is combined with the constructor's (both must match);
- ``search_kwargs={"k": ..., "filter": ...}`` is accepted too (the FAISS / `VectorStoreRetriever` spelling);
- any other keyword, in the constructor (``extra="forbid"``) or per call, raises `UnknownArgumentError` naming it.

Example::

    from ctxrag import KnowledgeBase
    retriever = KnowledgeBase.open("demo").as_retriever(mode="hybrid", k=5)
    retriever.invoke("what is contextual retrieval?", k=2, filter={"doc_id": ["3f2a..."]})
    retriever.invoke("what is contextual retrieval?", top=2)   # UnknownArgumentError: unknown argument 'top'
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStoreRetriever
from pydantic import ConfigDict, Field

from ctxrag.stores.filters import MetadataFilter, check_filter, combine_filters
from ctxrag.stores.filters import metadata_matches as metadata_matches  # the old import path, kept

COMMON_ARGUMENTS = frozenset({"k", "filter"})


class UnknownArgumentError(TypeError, ValueError):
    """A retriever got an argument it does not know (a `TypeError`, as Python raises, and a `ValueError`)."""


def check_k(k: Any, where: str = "k") -> int:
    """`k` if it is a positive int, else `ValueError` naming it."""
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ValueError(f"{where} must be a positive int, got {k!r}")
    return k


def call_arguments(
    owner: str, kwargs: dict[str, Any], allowed: Iterable[str] = COMMON_ARGUMENTS
) -> dict[str, Any]:
    """Per-call arguments of retriever `owner`: ``search_kwargs`` merged in, unknown names rejected.

    Returns only the names given (the caller applies its own defaults).
    """
    allowed = frozenset(allowed)
    args = dict(kwargs)
    nested = args.pop("search_kwargs", None)
    if nested is not None:
        if not isinstance(nested, Mapping):
            raise ValueError(f"{owner}: search_kwargs must be a dict, got {type(nested).__name__}")
        both = sorted(set(nested) & set(args))
        if both:
            raise ValueError(f"{owner}: {both} given both directly and in search_kwargs")
        args.update(nested)
    unknown = sorted(set(args) - allowed)
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        raise UnknownArgumentError(
            f"{owner}: unknown argument{'s' if len(unknown) > 1 else ''} {names}; accepted: {sorted(allowed)}"
        )
    if "k" in args:
        check_k(args["k"], f"{owner}: k")
    if "filter" in args:
        check_filter(args["filter"], f"{owner}: filter")
    return args


class CtxragRetriever(BaseRetriever):
    """Base of ctxrag's retrievers: typed ``k`` and ``filter``, per-call overrides, unknown arguments rejected.

    Subclasses implement `_retrieve` (and `_aretrieve` where they can do better than a thread) and list any extra
    per-call options in ``call_options``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    k: int = Field(default=10, gt=0)
    """How many documents to return (the one name for the result count across ctxrag)."""
    filter: MetadataFilter | None = None
    """Metadata filter applied inside the index before the top-k cut (see the module docstring)."""

    call_options: ClassVar[frozenset[str]] = frozenset()
    """Per-call options this retriever accepts besides ``k`` and ``filter``."""

    def _arguments(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        args = call_arguments(type(self).__name__, kwargs, COMMON_ARGUMENTS | self.call_options)
        args.setdefault("k", self.k)
        args["filter"] = combine_filters(self.filter, args.get("filter"))
        return args

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        raise NotImplementedError

    async def _aretrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: AsyncCallbackManagerForRetrieverRun,
        **options: Any,
    ) -> list[Document]:
        return await asyncio.to_thread(
            self._retrieve, query, k=k, filter=filter, run_manager=run_manager.get_sync(), **options
        )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return self._retrieve(query, run_manager=run_manager, **self._arguments(kwargs))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return await self._aretrieve(query, run_manager=run_manager, **self._arguments(kwargs))


def accepts_filter(retriever: Any) -> bool:
    """Whether `retriever` applies a per-call ``filter`` (rather than LangChain dropping it silently)."""
    return isinstance(retriever, (CtxragRetriever, VectorStoreRetriever))


def sub_call_kwargs(retriever: Any, k: int | None, filter: MetadataFilter | None, owner: str) -> dict[str, Any]:
    """Keyword arguments to pass a sub-retriever: ``k`` (at least its own depth) and ``filter``.

    A filter for a sub-retriever that cannot apply it raises `ValueError` naming that retriever: returning its
    unfiltered results would leak documents the caller excluded.
    """
    out: dict[str, Any] = {}
    if isinstance(retriever, CtxragRetriever) and k is not None and retriever.k is not None:  # None: returns all
        out["k"] = max(k, retriever.k)
    if filter is not None:
        if not accepts_filter(retriever):
            name = getattr(retriever, "name", None) or type(retriever).__name__
            raise ValueError(
                f"{owner}: sub-retriever {name!r} ({type(retriever).__name__}) cannot apply a per-call filter; "
                "use ctxrag retrievers or a VectorStoreRetriever, or filter when building it"
            )
        out["filter"] = filter
    return out
