"""Stage-by-stage debug logging of retrievals, prompts and completions, with full texts (never truncated).

Example::

    import logging
    from ctxrag.debug import DebugLogHandler
    logging.basicConfig(level=logging.DEBUG)
    chain.invoke("question", config={"callbacks": [DebugLogHandler()]})
"""
from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

log = logging.getLogger("ctxrag.stages")


class DebugLogHandler(BaseCallbackHandler):
    """Logs each retriever result, chat prompt and completion at DEBUG level, texts in full."""

    def on_retriever_start(self, serialized: dict[str, Any], query: str, *, run_id: UUID, **kw: Any) -> None:
        name = (serialized or {}).get("name") or kw.get("name") or "retriever"
        log.debug("retrieve[%s] query=%r", name, query)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kw: Any) -> None:
        for i, d in enumerate(documents, 1):
            md = {k: v for k, v in d.metadata.items() if k != "context"}
            log.debug("  #%d %s\n    metadata=%s\n    context=%s\n    text=%s", i, d.metadata.get("chunk_id"), md,
                      d.metadata.get("context"), d.page_content)

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[Any]], **kw: Any) -> None:
        for batch in messages:
            for m in batch:
                log.debug("prompt[%s]:\n%s", getattr(m, "type", "?"), getattr(m, "content", m))

    def on_llm_end(self, response: Any, **kw: Any) -> None:
        for gens in getattr(response, "generations", []):
            for g in gens:
                log.debug("completion:\n%s", getattr(g, "text", g))

    def on_chain_error(self, error: BaseException, **kw: Any) -> None:
        log.debug("stage failed: %s", error)
