"""How chunks get their context at ingest: the contextual-retrieval strategies, by name.

| strategy | LLM calls | context of a chunk |
|---|---|---|
| ``chunk`` | one per chunk | Anthropic's prompt: where this chunk sits in its document (`Contextualizer`) |
| ``document`` | one per document | a title line + 2-3 sentence summary of the document (`DocumentContextualizer`) |
| ``header`` | none | "title > heading path" (`HeaderContextualizer`) |
| ``chunk+header``, ``document+header`` | as above | the header line, then the LLM's context |
| ``auto`` (default of ``ctxrag ingest``) | one per non-Chinese document | ``header`` for Chinese documents, ``document`` for the others |
| ``none`` | none | no context |

``auto`` follows the golden-chunks benchmarks: the per-document LLM context lifts hybrid retrieval on English code
with one call per document (docs/benchmarks/golden_chunks.md), but on Chinese it pulls the embeddings of an
article's paragraphs together and costs dense recall, where the article title alone does better
(docs/benchmarks/golden_chunks_chinese.md).

Example::

    from ctxrag.indexing.contexts.strategies import ContextStrategy, make_contextualizer
    ctx = make_contextualizer("document+header")          # the local model, the default cache
    contexts = ctx.contextualize_document(text, chunk_texts, title="guide.md", heading_paths=paths)
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from ctxrag.enums import ChoiceEnum
from ctxrag.indexing.contexts.report import ContextReport
from ctxrag.indexing.contexts.text import fallback_header
from ctxrag.indexing.contexts.chunk_context import Contextualizer
from ctxrag.indexing.contexts.document_context import DocumentContextualizer
from ctxrag.text import detect_language


class ContextStrategy(ChoiceEnum):
    """A contextual-retrieval strategy; `ContextStrategy.from_str("document+header")`."""

    __label__ = "context strategy"

    NONE = "none"
    HEADER = "header"
    CHUNK = "chunk"
    DOCUMENT = "document"
    CHUNK_HEADER = "chunk+header"
    DOCUMENT_HEADER = "document+header"
    AUTO = "auto"

    @property
    def uses_llm(self) -> bool:
        return self not in (ContextStrategy.NONE, ContextStrategy.HEADER)

    @property
    def with_header(self) -> bool:
        return self.value.endswith("header")


@runtime_checkable
class ChunkContextualizer(Protocol):
    """What ingest needs: one context per chunk of a document, and a report of what it cost."""

    def contextualize_document(
        self, document_text: str, chunks: Sequence[str], *, title: str = "",
        heading_paths: Sequence[str] | None = None, offsets: Sequence[int | None] | None = None,
    ) -> list[str]: ...

    def report(self) -> ContextReport: ...


class HeaderContextualizer:
    """No LLM: each chunk's context is "title > heading path" (empty when the document has neither).

    Example::

        HeaderContextualizer().contextualize_document("...", ["a", "b"], title="guide.md", heading_paths=["Setup", ""])
        # ["guide.md > Setup", "guide.md"]
    """

    def __init__(self) -> None:
        self._stats = ContextReport()

    def contextualize_document(
        self, document_text: str, chunks: Sequence[str], *, title: str = "",
        heading_paths: Sequence[str] | None = None, offsets: Sequence[int | None] | None = None,
    ) -> list[str]:
        if heading_paths is not None and len(heading_paths) != len(chunks):
            raise ValueError(f"heading_paths has {len(heading_paths)} entries for {len(chunks)} chunks")
        paths = heading_paths or [""] * len(chunks)
        self._stats.documents += 1
        self._stats.chunks += len(chunks)
        self._stats.fallbacks += len(chunks)
        return [fallback_header(title, p) for p in paths]

    def report(self) -> ContextReport:
        return ContextReport(**{**self._stats.__dict__, "fallback_reason": "strategy 'header' (no LLM)"})

    def reset_stats(self) -> None:
        self._stats = ContextReport()


class HeaderedContextualizer:
    """Wraps an LLM contextualizer: each context becomes "title > heading path" on one line, the LLM's text after it
    (only the header when the LLM fell back to it)."""

    def __init__(self, inner: ChunkContextualizer) -> None:
        self.inner = inner

    @staticmethod
    def combine(header: str, context: str) -> str:
        if not header or context == header or context.startswith(header + "\n"):
            return context
        if not context or header.startswith(context):  # the inner fell back to (part of) the header
            return header
        return f"{header}\n{context}"

    def contextualize_document(
        self, document_text: str, chunks: Sequence[str], *, title: str = "",
        heading_paths: Sequence[str] | None = None, offsets: Sequence[int | None] | None = None,
    ) -> list[str]:
        contexts = self.inner.contextualize_document(
            document_text, chunks, title=title, heading_paths=heading_paths, offsets=offsets)
        paths = heading_paths or [""] * len(chunks)
        return [self.combine(fallback_header(title, p), c) for p, c in zip(paths, contexts)]

    def report(self) -> ContextReport:
        return self.inner.report()

    def reset_stats(self) -> None:
        reset = getattr(self.inner, "reset_stats", None)
        if reset is not None:
            reset()

    def __getattr__(self, name: str) -> Any:  # cache, model_name, ... of the wrapped contextualizer
        return getattr(self.inner, name)


class LanguageContextualizer:
    """Per document, by its language: Chinese documents get `chinese`'s contexts, all others `other`'s. Each side is
    built on first use, so a Chinese-only knowledge base under ``auto`` never loads the chat model. `language`
    ("zh"/"en", e.g. the ``CTXRAG_LANGUAGE`` setting) overrides detection.

    Example::

        ctx = LanguageContextualizer(chinese=HeaderContextualizer, other=lambda: make_contextualizer("document"))
        ctx.contextualize_document("臺灣位於東亞。", ["臺灣位於東亞。"], title="臺灣")  # ["臺灣"]: the title, no LLM
    """

    def __init__(
        self, *, chinese: Callable[[], ChunkContextualizer], other: Callable[[], ChunkContextualizer],
        language: Literal["auto", "zh", "en"] = "auto",
    ) -> None:
        if language not in ("auto", "zh", "en"):
            raise ValueError(f"language={language!r}: choose auto, zh or en")
        self._factories = {"zh": chinese, "en": other}
        self._built: dict[str, ChunkContextualizer] = {}
        self._lock = threading.Lock()
        self.language = language

    def side(self, document_text: str) -> ChunkContextualizer:
        """The contextualizer for this document (built now if it is the first of its language)."""
        lang = detect_language(document_text) if self.language == "auto" else self.language
        with self._lock:
            if lang not in self._built:
                self._built[lang] = self._factories[lang]()
            return self._built[lang]

    def contextualize_document(
        self, document_text: str, chunks: Sequence[str], *, title: str = "",
        heading_paths: Sequence[str] | None = None, offsets: Sequence[int | None] | None = None,
    ) -> list[str]:
        return self.side(document_text).contextualize_document(
            document_text, chunks, title=title, heading_paths=heading_paths, offsets=offsets)

    def report(self) -> ContextReport:
        with self._lock:
            built = list(self._built.values())
        return ContextReport.total(c.report() for c in built)

    def reset_stats(self) -> None:
        with self._lock:
            built = list(self._built.values())
        for c in built:
            reset = getattr(c, "reset_stats", None)
            if reset is not None:
                reset()


def make_contextualizer(
    strategy: str | ContextStrategy,
    *,
    chat_model: Any = None,
    settings: Any = None,
    **kwargs: Any,
) -> ChunkContextualizer | None:
    """The contextualizer for `strategy` (None for ``none``); `kwargs` go to the LLM contextualizer (cache,
    max_tokens, show_progress, ...). ``auto`` builds the LLM side only when a non-Chinese document arrives."""
    s = ContextStrategy.from_str(strategy)
    if s is ContextStrategy.AUTO:
        language = getattr(settings, "language", "auto")
        return LanguageContextualizer(
            chinese=HeaderContextualizer, language=language,
            other=lambda: make_contextualizer(ContextStrategy.DOCUMENT, chat_model=chat_model, settings=settings,
                                              **kwargs))
    if s is ContextStrategy.NONE:
        return None
    if s is ContextStrategy.HEADER:
        return HeaderContextualizer()
    cls = DocumentContextualizer if s in (ContextStrategy.DOCUMENT, ContextStrategy.DOCUMENT_HEADER) else Contextualizer
    inner = cls(chat_model, settings=settings, **kwargs)
    return HeaderedContextualizer(inner) if s.with_header else inner
