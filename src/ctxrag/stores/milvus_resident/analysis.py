"""What Milvus's full-text BM25 analyzes for a Milvus-resident knowledge base, and the analyzer that reads it.

One analyzed VARCHAR field per chunk feeds Milvus's ``BM25`` function. Two choices, fixed when the collection is
created (``CTXRAG_MILVUS_ANALYSIS``):

- ``ctxrag`` (default): the field holds ctxrag's own BM25 tokens (`MixedTokenizer`: jieba for CJK runs with
  Traditional -> Simplified by OpenCC t2s, identifier splitting and stopwords for English and code), joined by
  spaces, and Milvus splits them on whitespace (milvus-lite, which has no ``whitespace`` tokenizer: its
  ``standard`` one, ``\\w+`` words, which splits our tokens nowhere). Queries are tokenized the same way, so Milvus
  ranks the same terms our local BM25 ranks; only the scoring differs. (A server's ``standard`` tokenizer has its
  own rules for CJK and punctuation, so servers get ``whitespace``.)
- ``milvus``: the field holds the text converted by OpenCC t2s, and Milvus's own ``jieba`` tokenizer with a
  lowercase filter segments Chinese and English alike (no identifier splitting, no stopwords).

Example::

    from ctxrag.stores.milvus_resident.analysis import analyzed_text, analyzer_params
    analyzer_params("ctxrag")                       # {"tokenizer": "whitespace"}; milvus-lite: "standard"
    analyzed_text("臺灣的 HTTPServer", "ctxrag")      # "台湾 httpserver http server"
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ctxrag.errors import ConfigError
from ctxrag.text import to_simplified

ANALYSES = ("ctxrag", "milvus")


def check_analysis(analysis: str) -> str:
    if analysis not in ANALYSES:
        raise ConfigError(f"unknown Milvus BM25 analysis {analysis!r}; choose one of {', '.join(ANALYSES)}")
    return analysis


def analyzer_params(analysis: str, *, lite: bool = False) -> dict[str, Any]:
    """The Milvus ``analyzer_params`` of the analyzed field (`lite`: milvus-lite, file or server)."""
    if check_analysis(analysis) == "ctxrag":
        return {"tokenizer": "standard" if lite else "whitespace"}
    return {"tokenizer": "jieba", "filter": ["lowercase"]}


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    from ctxrag.stores.bm25.tokenize import make_tokenizer

    return make_tokenizer("mixed")  # what BM25ChunkIndex uses by default


def analyzed_text(text: str, analysis: str) -> str:
    """The text Milvus analyzes for a chunk or a query (both go through the same function)."""
    if check_analysis(analysis) == "ctxrag":
        return " ".join(_tokenizer()(text))
    return to_simplified(text)
