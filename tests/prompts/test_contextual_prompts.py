"""The contextual-retrieval prompts: Anthropic's text verbatim, the Chinese variant, custom prompts and versions."""
from __future__ import annotations

import pytest

from ctxrag.prompts.contextual import (
    CHUNK_CONTEXT_PROMPT,
    DOCUMENT_CONTEXT_PROMPT,
    PROMPT_VERSION,
    ContextPrompt,
    default_context_prompts,
)


def test_english_prompt_is_anthropics_verbatim() -> None:
    assert DOCUMENT_CONTEXT_PROMPT == "<document>\n{doc_content}\n</document>"
    assert CHUNK_CONTEXT_PROMPT == (
        "Here is the chunk we want to situate within the whole document\n<chunk>\n{chunk_content}\n</chunk>\n\n"
        "Please give a short succinct context to situate this chunk within the overall document for the purposes of "
        "improving search retrieval of the chunk.\nAnswer only with the succinct context and nothing else."
    )


def test_defaults_have_both_languages_with_distinct_versions() -> None:
    prompts = default_context_prompts()
    assert set(prompts) == {"en", "zh"}
    assert prompts["en"].version != prompts["zh"].version
    assert all(PROMPT_VERSION in p.version for p in prompts.values())
    assert "<chunk>" in prompts["zh"].chunk_template and "上下文" in prompts["zh"].chunk_template


def test_render_keeps_braces_of_code() -> None:
    en = default_context_prompts()["en"]
    doc = 'fn main() { let x = {"a": 1}; } {chunk_content}'
    assert en.render_document(doc) == f"<document>\n{doc}\n</document>"
    assert "<chunk>\nif (x) { y(); }\n</chunk>" in en.render_chunk("if (x) { y(); }")


def test_custom_prompt_version_follows_its_text() -> None:
    a = ContextPrompt("<d>{doc_content}</d>", "Situate {chunk_content}")
    b = ContextPrompt("<d>{doc_content}</d>", "Situate this: {chunk_content}")
    assert a.version.startswith("custom-") and a.version != b.version
    assert ContextPrompt("<d>{doc_content}</d>", "Situate {chunk_content}").version == a.version
    assert ContextPrompt("{doc_content}", "{chunk_content}", version="mine-2").version == "mine-2"


@pytest.mark.parametrize(
    ("doc", "chunk", "message"),
    [("<d></d>", "{chunk_content}", "document_template must contain"), ("{doc_content}", "x", "chunk_template must contain")],
)
def test_templates_need_their_placeholder(doc: str, chunk: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ContextPrompt(doc, chunk)
