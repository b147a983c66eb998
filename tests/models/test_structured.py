from __future__ import annotations

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from pydantic import BaseModel

from ctxrag.models.llamacpp import LocalLlamaChatModel
from ctxrag.models.structured import structured_reply, with_max_tokens
from structured_fake import StructuredFake


class Verdict(BaseModel):
    relevant: bool


def test_model_with_structured_output_gives_the_instance() -> None:
    model = StructuredFake.of({"relevant": True})
    reply = structured_reply(model, Verdict, "Is Paris in France?")
    assert reply.parsed == Verdict(relevant=True) and reply.error is None
    assert model.schemas[0]["function"]["name"] == "Verdict"


def test_reply_that_does_not_validate_keeps_its_text() -> None:
    reply = structured_reply(StructuredFake.of("yes, it is"), Verdict, "Is Paris in France?")
    assert reply.parsed is None and reply.text == "yes, it is" and reply.error


def test_model_without_structured_output_answers_in_text() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("Yes.")]))
    reply = structured_reply(model, Verdict, "Is Paris in France?")
    assert (reply.parsed, reply.text, reply.error) == (None, "Yes.", "structured output not used")


def test_structured_false_never_asks_for_the_schema() -> None:
    model = StructuredFake.of("Yes.")
    reply = structured_reply(model, Verdict, "Is Paris in France?", structured=False)
    assert reply.parsed is None and reply.text == "Yes." and model.schemas == []


def test_with_max_tokens_sets_the_field_or_binds() -> None:
    local = LocalLlamaChatModel(model_path="not-loaded.gguf", max_tokens=512)
    assert with_max_tokens(local, 8).max_tokens == 8 and local.max_tokens == 512
    fake = GenericFakeChatModel(messages=iter([]))
    assert with_max_tokens(fake, 8).kwargs == {"max_tokens": 8}
    assert with_max_tokens(fake, None) is fake
