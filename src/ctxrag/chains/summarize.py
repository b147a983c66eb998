"""Summaries of whole documents for divergent questions ("这几篇文章讲了什么？"): stored summary, one call, or map-reduce.

For each document: a stored (model-written) catalog summary when there is one; else, with a chat model, one summary
call when the text fits `window_chars`, or map-reduce when it does not (summarise windows of consecutive chunks, then
merge the partial summaries, again in groups when there are many); without a model, the extractive summary.

Example::

    from ctxrag.chains.summarize import DocumentSummarizer
    s = DocumentSummarizer(kb, llm, window_chars=3000)
    s.summarize(doc_id)            # str
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from ctxrag.stores.protocols import CatalogSource, DocumentCatalogView
from ctxrag.text import detect_language, extractive_summary

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from langchain_core.language_models import BaseChatModel

log = logging.getLogger(__name__)


class DocumentSummarizer:
    """Whole-document summaries for the summary route (see the module docstring)."""

    def __init__(self, kb: CatalogSource, llm: BaseChatModel | None = None, *, catalog: DocumentCatalogView | None = None,
                 window_chars: int = 3000, reduce_group: int = 6, max_tokens: int = 120,
                 use_stored: bool = True) -> None:
        if window_chars < 200:
            raise ValueError(f"window_chars must be at least 200, got {window_chars}")
        if reduce_group < 2:
            raise ValueError(f"reduce_group must be at least 2, got {reduce_group}")
        self.kb = kb
        self.llm = llm
        self.catalog = catalog or kb.catalog()
        self.window_chars = window_chars
        self.reduce_group = reduce_group
        self.max_tokens = max_tokens
        self.use_stored = use_stored
        self.calls = 0
        """LLM calls made so far (map + reduce), for tests and reports."""

    def summarize(self, doc_id: str, config: RunnableConfig | None = None) -> str:
        """The document's summary; `config` (callbacks, tags) reaches every LLM call (map and reduce)."""
        doc = self.kb.documents.get_document(doc_id)
        if doc is None:
            raise KeyError(f"no document {doc_id!r} in knowledge base {self.kb.name!r}")
        if self.use_stored and doc.summary and doc.summary.strip():
            return doc.summary.strip()
        if self.llm is None:
            return extractive_summary(doc.title, doc.text)
        lang = detect_language(doc.text)
        if len(doc.text) <= self.window_chars:
            return self._call("summary", doc.title, doc.text, lang, config) or extractive_summary(doc.title, doc.text)
        windows = self._windows([c.content for c in self.kb.documents.chunks_of(doc_id)] or [doc.text])
        parts = [p for p in (self._call("map", doc.title, w, lang, config) for w in windows) if p]
        if not parts:
            return extractive_summary(doc.title, doc.text)
        while len(parts) > 1:
            groups = [parts[i : i + self.reduce_group] for i in range(0, len(parts), self.reduce_group)]
            parts = [self._reduce(doc.title, g, lang, config) for g in groups]
        return parts[0]

    def _windows(self, chunks: list[str]) -> list[str]:
        out: list[str] = []
        cur = ""
        for c in chunks:
            c = c[: self.window_chars]
            if cur and len(cur) + len(c) + 2 > self.window_chars:
                out.append(cur)
                cur = ""
            cur = f"{cur}\n\n{c}" if cur else c
        if cur:
            out.append(cur)
        return out

    def _reduce(self, title: str, parts: list[str], lang: str, config: RunnableConfig | None = None) -> str:
        if len(parts) == 1:
            return parts[0]
        from ctxrag.prompts.router import reduce_messages

        return self._invoke(reduce_messages(title, parts, lang), config) or " ".join(parts)[: self.window_chars]

    def _call(self, kind: str, title: str, text: str, lang: str, config: RunnableConfig | None = None) -> str:
        from ctxrag.prompts.router import map_messages, summary_messages

        msgs = summary_messages(title, text, lang) if kind == "summary" else map_messages(title, text, lang)
        return self._invoke(msgs, config)

    def _invoke(self, msgs: list[BaseMessage], config: RunnableConfig | None = None) -> str:
        if self.llm is None:
            raise ValueError("this summariser has no chat model (llm=None): pass one to summarise with a model")
        self.calls += 1
        reply = self.llm.bind(max_tokens=self.max_tokens).invoke(msgs, config)
        return str(getattr(reply, "content", reply) or "").strip()
