"""What Milvus's BM25 analyzes: ctxrag's tokens (Traditional Chinese simplified, identifiers split) or the
OpenCC-simplified text for Milvus's jieba."""
from __future__ import annotations

import pytest

from ctxrag.errors import ConfigError
from ctxrag.stores.bm25.tokenize import make_tokenizer
from ctxrag.stores.milvus_resident.analysis import analyzed_text, analyzer_params


def test_ctxrag_analysis_is_our_bm25_tokens() -> None:
    text = "臺灣的 HTTPServer 支持 user_name"
    assert analyzed_text(text, "ctxrag").split() == make_tokenizer("mixed")(text)
    assert analyzed_text("臺灣的首都", "ctxrag") == analyzed_text("台湾的首都", "ctxrag")


def test_milvus_analysis_simplifies_for_jieba() -> None:
    assert analyzed_text("為什麼臺灣", "milvus") == "为什么台湾"
    assert analyzer_params("milvus") == {"tokenizer": "jieba", "filter": ["lowercase"]}


def test_analyzers_by_server_and_errors() -> None:
    assert analyzer_params("ctxrag") == {"tokenizer": "whitespace"}
    assert analyzer_params("ctxrag", lite=True) == {"tokenizer": "standard"}
    with pytest.raises(ConfigError, match="'porter'"):
        analyzed_text("x", "porter")
