"""build_reranker: the reranker a `Reranker` kind (or its name) asks for, configured by settings.rerank."""
from __future__ import annotations

import pytest

from ctxrag.compressors import JinaReranker, LLMReranker, Reranker, build_reranker
from ctxrag.errors import ConfigError
from ctxrag.settings import LLMSettings, RerankSettings, Settings


def test_none_means_no_reranker():
    assert build_reranker("none", Settings()) is None
    assert build_reranker(Reranker.NONE, Settings()) is None


def test_jina_from_settings():
    settings = Settings(rerank=RerankSettings(base_url="http://127.0.0.1:9997/v1", model="bge-reranker-v2-m3",
                                              api_key="sk-hidden", timeout=5.0, top_n=7))
    reranker = build_reranker("JINA", settings)
    assert isinstance(reranker, JinaReranker)
    assert (reranker.base_url, reranker.model, reranker.timeout, reranker.top_n) == (
        "http://127.0.0.1:9997/v1", "bge-reranker-v2-m3", 5.0, 7)
    assert reranker.api_key.get_secret_value() == "sk-hidden"
    assert "sk-hidden" not in repr(reranker)


def test_kind_as_enum_member():
    settings = Settings(rerank=RerankSettings(api_key="k"))
    assert isinstance(build_reranker(Reranker.JINA, settings), JinaReranker)


def test_jina_public_api_without_key_fails_at_build():
    """No key and the public URL: a ConfigError naming the setting, before any request."""
    with pytest.raises(ConfigError, match="CTXRAG_RERANK__API_KEY"):
        build_reranker("jina", Settings())
    local = build_reranker("jina", Settings(rerank=RerankSettings(base_url="http://127.0.0.1:9/v1")))
    assert isinstance(local, JinaReranker)  # a self-hosted server needs no key


def test_llm_uses_the_configured_chat_model():
    settings = Settings(llm=LLMSettings(provider="openai", base_url="http://127.0.0.1:1/v1"),
                        rerank=RerankSettings(top_n=4), language="zh")
    reranker = build_reranker("llm", settings)
    assert isinstance(reranker, LLMReranker)
    assert reranker.top_n == 4 and reranker.language == "zh"
    from langchain_openai import ChatOpenAI

    assert isinstance(reranker.llm, ChatOpenAI)


def test_unknown_kind():
    with pytest.raises(ConfigError, match="unknown reranker 'cohere'; choose one of: none, jina, llm"):
        build_reranker("cohere", Settings())
