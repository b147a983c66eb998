"""A fake chat model with structured output, for fast composition tests of the code that asks for it.

``StructuredFake.of({"route": "rag"}, ...)`` answers each call with the next object as a tool call (so LangChain's
own ``with_structured_output`` parses it) and records the schemas it was asked for; ``"text"`` items come back as
plain replies, as from a model that ignores the schema.
"""
from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.utils.function_calling import convert_to_openai_tool


class StructuredFake(GenericFakeChatModel):
    schemas: list = []

    @classmethod
    def of(cls, *replies: dict | str) -> "StructuredFake":
        messages = [AIMessage(r) if isinstance(r, str) else AIMessage("", tool_calls=[
            {"name": "PLACEHOLDER", "args": r, "id": f"call_{i}", "type": "tool_call"}]) for i, r in enumerate(replies)]
        model = cls(messages=iter(messages))
        model.schemas = []
        return model

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        formatted = [convert_to_openai_tool(t) for t in tools]
        self.schemas.extend(formatted)
        return self.bind(**kwargs)

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        message = result.generations[0].message
        if message.tool_calls:  # name the call after the tool the caller bound
            name = self.schemas[-1]["function"]["name"]
            message.tool_calls = [{**c, "name": name} for c in message.tool_calls]
        return result
