"""Helpers shared by the assistant tests (imported by module name: the test folders are not packages)."""
from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from ctxrag.kb.local import KnowledgeBase


def doc_id(kb: KnowledgeBase, name: str) -> str:
    return kb.get_document(name).doc_id


class ScriptedChat(GenericFakeChatModel):
    """A fake chat model that replies with the given texts in order and records every prompt it saw."""

    prompts: list = []

    @classmethod
    def of(cls, *replies: str) -> "ScriptedChat":
        model = cls(messages=iter([AIMessage(r) for r in replies]))
        model.prompts = []
        return model

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        self.prompts.append(messages)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
