"""`BM25Retriever`: LangChain retriever over a `BM25Index`, adding ``bm25_score`` (and ``score``) to metadata.

It owns its index and, usually, its documents (built with `from_documents`, like LangChain's `BM25Retriever`, which
it replaces): for texts that are not in a knowledge base. A knowledge base's BM25 is searched by
`ctxrag.retrievers.kb_bm25.KBBM25Retriever` instead, which reads the knowledge base's committed index and chunks.

>>> from langchain_core.documents import Document
>>> retriever = BM25Retriever.from_documents(
...     [Document("jieba 中文分词", id="a"), Document("English keyword search", id="b")], k=1)
>>> [d.id for d in retriever.invoke("keyword")]
['b']
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from pydantic import Field

from ctxrag import schema
from ctxrag.retrievers.base import CtxragRetriever
from ctxrag.stores.bm25.index import BM25Index
from ctxrag.stores.bm25.tokenize import Tokenizer
from ctxrag.stores.filters import MetadataFilter, matcher


class BM25Retriever(CtxragRetriever):
    """Lexical retrieval with ctxrag's BM25.

    Documents come from `documents` (kept by `from_documents`/`add_documents`) or from `lookup`, a function from
    ids to documents such as ``kb.chunks.get_chunks``. ``invoke(query, k=..., filter=..., allowed_ids=...)``
    overrides `k`, filters by metadata (documents it owns) and restricts results to the given ids, all before the
    top-k cut. Like LangChain's `BM25Retriever` it returns `k` documents when fewer contain a query word (``fill``).
    """

    index: BM25Index
    """The index searched."""
    k: int = Field(4, gt=0)
    """How many documents to return."""
    fill: bool = True
    """Return ``k`` documents when fewer contain a query word: zero-score documents follow in index order."""
    documents: dict[str, Document] = Field(default_factory=dict)
    """Documents by id, when the retriever owns them."""
    lookup: Callable[[list[str]], list[Document]] | None = None
    """Fetches documents by id (in the given order) when they live elsewhere, e.g. ``kb.chunks.get_chunks``."""

    call_options: ClassVar[frozenset[str]] = frozenset({"allowed_ids"})

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        *,
        tokenizer: str | Tokenizer = "mixed",
        variant: str = "okapi",
        k: int = 4,
        **params: Any,
    ) -> BM25Retriever:
        """Index `documents`; each is keyed by its ``id``, else ``metadata["chunk_id"]``, else its position.

        `params` are `BM25Index` options (``k1``, ``b``, ...) or retriever fields (``filter``, ``fill``, ``name``).
        """
        fields = {name: params.pop(name) for name in list(params) if name in cls.model_fields}
        retriever = cls(index=BM25Index(tokenizer, variant, **params), k=k, **fields)
        retriever.add_documents(list(documents))
        return retriever

    @classmethod
    def from_texts(cls, texts: Sequence[str], metadatas: Sequence[dict] | None = None, **kwargs: Any) -> BM25Retriever:
        metadatas = metadatas or [{} for _ in texts]
        return cls.from_documents([Document(t, metadata=dict(m)) for t, m in zip(texts, metadatas)], **kwargs)

    def add_documents(self, documents: Sequence[Document]) -> list[str]:
        """Index documents (an id already present is replaced); returns their ids."""
        start = len(self.documents)
        ids = [d.id or d.metadata.get(schema.CHUNK_ID) or str(start + i) for i, d in enumerate(documents)]
        self.index.add([d.page_content for d in documents], ids=ids)
        self.documents.update(zip(ids, documents))
        return ids

    def delete(self, ids: Iterable[str]) -> int:
        ids = list(ids)
        for doc_id in ids:
            self.documents.pop(doc_id, None)
        return self.index.delete(ids)

    def _allowed(self, filter: MetadataFilter | None, allowed_ids: Iterable[str] | None) -> set[str] | None:
        allowed = None if allowed_ids is None else set(allowed_ids)
        if filter is not None:
            if not self.documents:
                raise ValueError(
                    "BM25Retriever: a metadata filter needs the documents (from_documents/add_documents); "
                    "with only `lookup`, pass allowed_ids instead"
                )
            matches = matcher(filter)
            matching = {i for i, d in self.documents.items() if matches(d.metadata)}
            allowed = matching if allowed is None else allowed & matching
        return allowed

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None, run_manager: CallbackManagerForRetrieverRun,
        allowed_ids: Iterable[str] | None = None, **options: Any,
    ) -> list[Document]:
        allowed = self._allowed(filter, allowed_ids)
        hits = self.index.search(query, k=k, allowed_ids=allowed, fill=self.fill)
        if not hits:
            return []
        ids = [doc_id for doc_id, _ in hits]
        if self.lookup is not None:
            found = {d.id or d.metadata.get(schema.CHUNK_ID): d for d in self.lookup(ids)}
        else:
            found = self.documents
        out = []
        for doc_id, score in hits:
            doc = found.get(doc_id)
            if doc is None:  # deleted from the store but not yet from the index: skip rather than fail a query
                continue
            metadata = {**doc.metadata, "bm25_score": score, schema.SCORE: score}
            out.append(Document(page_content=doc.page_content, metadata=metadata, id=doc.id or doc_id))
        return out
