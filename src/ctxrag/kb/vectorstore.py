"""A knowledge base as a LangChain `VectorStore`, so code written for FAISS or Chroma works unchanged.

Each added LangChain `Document` is stored as one knowledge-base document of exactly one chunk (the caller has split
already, as with any vector store): it lands in the SQLite store and in every index (dense, BM25, graph when on) in
one atomic commit, so ``kb.as_retriever(mode="hybrid")`` finds it too. Its id (given, or a generated uuid) is its
chunk id, so this face and ``kb.as_retriever`` return the same ``Document.id``. Search here returns the document as
it was added: its ``page_content``, its own ``metadata`` and its ``id``. Chunks ingested from files are returned with
the knowledge base's chunk metadata and their chunk id.

Scores, as LangChain's FAISS store gives them for the same (normalised) embeddings:

- `similarity_search_with_score`: a distance, lower is closer: the squared euclidean distance ``2 - 2 cos`` in [0, 4].
- `similarity_search_with_relevance_scores` and ``as_retriever(search_type="similarity_score_threshold")``:
  LangChain's relevance score, 0 worst and 1 best, ``1 - distance / sqrt(2)`` clipped to [0, 1]; so a
  ``score_threshold`` keeps the same documents as on a FAISS store.

``filter`` is a dict ``{key: value}`` / ``{key: [values]}`` or a predicate over the document's metadata, applied inside
the index (before the top-k cut).

The face sees the knowledge base only through `VectorStoreTarget` (chunks, documents, the dense index, and the two
writes), so this module sits below the facade: ``kb.as_vectorstore()`` builds ``KnowledgeBaseVectorStore(kb)``
without an import cycle, and a Milvus-resident knowledge base is a target too.

Example::

    from langchain_core.documents import Document
    from ctxrag import KnowledgeBase
    store = KnowledgeBase.open("demo").as_vectorstore()  # or KnowledgeBaseVectorStore(kb)
    store.add_documents([Document("FAISS keeps vectors in memory.", metadata={"topic": "faiss"})], ids=["faiss-1"])
    store.similarity_search("where are vectors kept?", k=1, filter={"topic": "faiss"})
    retriever = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 10})
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever
from pydantic import ConfigDict, model_validator

from ctxrag import schema
from ctxrag.models.embeddings import embed_array
from ctxrag.retrievers.base import UnknownArgumentError, check_k
from ctxrag.retrievers.dense import cosine_to_distance, distance_to_relevance, mmr_select
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord
from ctxrag.stores.filters import MetadataFilter, check_filter, matcher
from ctxrag.stores.protocols import KnowledgeSource

SOURCE_PREFIX = "langchain://"
"""Source URI of a document added through the face: ``langchain://{id}``."""
LC_ID = "lc_id"
"""Chunk metadata key holding the id the document was added with."""
LC_METADATA = "lc_metadata"
"""Chunk metadata key holding the document's own metadata, as added."""
FILE_TYPE = "langchain"
_RESERVED = frozenset({
    schema.CHUNK_ID, schema.DOC_ID, schema.KB, schema.SOURCE, schema.TITLE, schema.CHUNK_INDEX, schema.START_INDEX,
    schema.END_INDEX, schema.HEADING_PATH, schema.CONTEXT, schema.SCORE, "file_type", LC_ID, LC_METADATA,
})


class VectorStoreTarget(KnowledgeSource, Protocol):
    """What the face reads (a `KnowledgeSource`) and writes: `KnowledgeBase` and `MilvusKnowledgeBase` are both one."""

    def upsert_chunked(self, documents: list[tuple[DocumentRecord, list[ChunkRecord]]]) -> None:
        """Store already-chunked documents (replacing the same doc ids) in one commit."""

    def delete_documents(self, doc_ids: list[str]) -> list[str]:
        """Delete documents by id in one commit; unknown ids are ignored. Returns the ids deleted."""


def _no_extra(owner: str, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise UnknownArgumentError(f"{owner}: unknown argument(s) {sorted(kwargs)}")


class KnowledgeBaseVectorStore(VectorStore):
    """LangChain `VectorStore` over a knowledge base (see the module docstring): ``kb.as_vectorstore()``, or
    ``KnowledgeBaseVectorStore(kb)`` for any `VectorStoreTarget`."""

    def __init__(self, kb: VectorStoreTarget) -> None:
        self.kb = kb

    @property
    def embeddings(self) -> Embeddings:
        return self.kb.embeddings

    # -- ids ----------------------------------------------------------------------------------------------------
    def _doc_id(self, id: str) -> str:
        return schema.make_doc_id(self.kb.name, SOURCE_PREFIX + id)

    def _legacy_chunk_id(self, id: str) -> str:
        """The chunk id documents added before ids became chunk ids were stored under."""
        return schema.make_chunk_id(self._doc_id(id), 0)

    def _to_user(self, doc: Document) -> Document:
        md = doc.metadata
        if md.get("file_type") == FILE_TYPE and LC_ID in md:
            return Document(page_content=doc.page_content, metadata=dict(md.get(LC_METADATA) or {}), id=md[LC_ID])
        return Document(page_content=doc.page_content, metadata=dict(md), id=doc.id)

    # -- writing ------------------------------------------------------------------------------------------------
    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add (or replace, by id) documents; ids come from ``ids=[...]``, else ``Document.id``, else a new uuid."""
        ids = kwargs.pop("ids", None)
        _no_extra("add_documents", kwargs)
        if ids is not None and len(ids) != len(documents):
            raise ValueError(f"add_documents: got {len(ids)} ids for {len(documents)} documents")
        given = [ids[i] if ids is not None else None for i in range(len(documents))]
        out = [str(g or d.id or uuid.uuid4()) for g, d in zip(given, documents)]
        dup = next((i for i in out if out.count(i) > 1), None)
        if dup is not None:
            raise ValueError(f"add_documents: id {dup!r} appears twice in one call")
        taken = next((d for d in self.kb.chunks.get_chunks(out) if d.metadata.get(schema.DOC_ID) != self._doc_id(d.id or "")),
                     None)
        if taken is not None:
            raise ValueError(f"add_documents: id {taken.id!r} is already the chunk id of "
                             f"{taken.metadata.get(schema.SOURCE)!r} in knowledge base {self.kb.name!r}")
        self.kb.upsert_chunked([self._records(i, d) for i, d in zip(out, documents)])
        return out

    def add_texts(
        self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *, ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Add texts with optional metadatas and ids; returns the ids."""
        _no_extra("add_texts", kwargs)
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise ValueError(f"add_texts: got {len(metadatas)} metadatas for {len(texts)} texts")
        docs = [Document(page_content=t, metadata=dict(metadatas[i]) if metadatas else {}) for i, t in enumerate(texts)]
        return self.add_documents(docs, ids=ids)

    def _records(self, id: str, doc: Document) -> tuple[DocumentRecord, list[ChunkRecord]]:
        if not isinstance(doc.page_content, str):
            raise ValueError(f"document {id!r}: page_content must be a string, got {type(doc.page_content).__name__}")
        user = dict(doc.metadata)
        try:
            json.dumps(user, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"document {id!r}: metadata must be JSON-serialisable ({e})") from None
        source = SOURCE_PREFIX + id
        doc_id = self._doc_id(id)
        chunk_id = id  # the caller's id: every face of the knowledge base returns it as Document.id
        title = str(user.get("title") or id)
        md = {key: value for key, value in user.items() if key not in _RESERVED}
        md.update({
            schema.CHUNK_ID: chunk_id, schema.DOC_ID: doc_id, schema.KB: self.kb.name, schema.SOURCE: source,
            schema.TITLE: title, schema.CHUNK_INDEX: 0, schema.START_INDEX: 0, schema.END_INDEX: len(doc.page_content),
            schema.HEADING_PATH: "", "file_type": FILE_TYPE, LC_ID: id, LC_METADATA: user,
        })
        text = doc.page_content
        record = DocumentRecord(doc_id, source, title, schema.content_hash(text), text, 1,
                                {"file_type": FILE_TYPE, LC_ID: id})
        return record, [ChunkRecord(chunk_id, doc_id, 0, text, text, None, md)]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete by id (face ids, or knowledge-base document ids); unknown ids are ignored."""
        _no_extra("delete", kwargs)
        if ids is None:
            raise ValueError("delete: give the ids to delete (deleting everything is `ctxrag kb delete`)")
        doc_ids = [self._doc_id(i) if self.kb.documents.get_document(self._doc_id(i)) else i for i in ids]
        self.kb.delete_documents(doc_ids)
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Documents by id, in the order given; unknown ids are skipped. Chunk ids of ingested files work too."""
        found = {d.id: d for d in self.kb.chunks.get_chunks(list(ids))}
        missing = [i for i in ids if i not in found]
        if missing:  # added before ids became chunk ids
            legacy = self.kb.chunks.get_chunks([self._legacy_chunk_id(i) for i in missing])
            found.update({d.metadata[LC_ID]: d for d in legacy if LC_ID in d.metadata})
        return [self._to_user(found[i]) for i in ids if i in found]

    # -- searching ----------------------------------------------------------------------------------------------
    def _allowed(self, filter: MetadataFilter | None) -> AbstractSet[str] | None:
        check_filter(filter)
        if filter is None:
            return None
        if isinstance(filter, dict) and not set(filter) & _RESERVED:
            return self.kb.chunks.allowed_chunk_ids(filter)  # user keys are copied into the chunk metadata (cached path)
        matches = matcher(filter)
        return self.kb.chunks.allowed_chunk_ids(lambda md: matches(self._user_metadata(md)))

    @staticmethod
    def _user_metadata(md: dict[str, Any]) -> dict[str, Any]:
        return md.get(LC_METADATA) or {} if md.get("file_type") == FILE_TYPE and LC_ID in md else md

    def _hits(self, vector: np.ndarray, k: int, filter: MetadataFilter | None) -> list[tuple[str, float]]:
        check_k(k)
        return self.kb.dense_index().search(np.asarray(vector, dtype=np.float32), k, allowed_chunk_ids=self._allowed(filter))

    def _query_vector(self, query: str) -> np.ndarray:
        vector: np.ndarray = embed_array(self.embeddings, [query], is_query=True)[0]
        return vector

    def _with_scores(self, hits: list[tuple[str, float]]) -> list[tuple[Document, float]]:
        """``(document, distance)`` for cosine hits, closest first (see the module docstring)."""
        docs = {d.id: d for d in self.kb.chunks.get_chunks([c for c, _ in hits])}
        return [(self._to_user(docs[c]), cosine_to_distance(cos)) for c, cos in hits if c in docs]

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: MetadataFilter | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        _no_extra("similarity_search", kwargs)
        vec = np.asarray(embedding, dtype=np.float32)
        vec = vec / (np.linalg.norm(vec) or 1.0)
        return self._with_scores(self._hits(vec, k, filter))

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: MetadataFilter | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The `k` closest documents with their distance (``2 - 2 cos``, lower is closer, as LangChain's FAISS store
        gives it), closest first."""
        _no_extra("similarity_search", kwargs)
        return self._with_scores(self._hits(self._query_vector(query), k, filter))

    def similarity_search(
        self, query: str, k: int = 4, filter: MetadataFilter | None = None, **kwargs: Any
    ) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: MetadataFilter | None = None, **kwargs: Any
    ) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score_by_vector(embedding, k, filter, **kwargs)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """Distance -> LangChain's relevance (0 worst, 1 best), as the FAISS store maps it."""
        return distance_to_relevance

    def max_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5,
        filter: MetadataFilter | None = None, **kwargs: Any,
    ) -> list[Document]:
        _no_extra("max_marginal_relevance_search", kwargs)
        vec = np.asarray(embedding, dtype=np.float32)
        vec = vec / (np.linalg.norm(vec) or 1.0)
        hits = self._hits(vec, max(check_k(k), check_k(fetch_k, "fetch_k")), filter)
        if not hits:
            return []
        order = mmr_select(vec, self.kb.dense_index().vectors([c for c, _ in hits]), k, lambda_mult)
        return [d for d, _ in self._with_scores([hits[i] for i in order])]

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5,
        filter: MetadataFilter | None = None, **kwargs: Any,
    ) -> list[Document]:
        """`k` documents chosen by maximal marginal relevance among the `fetch_k` closest."""
        return self.max_marginal_relevance_search_by_vector(
            self._query_vector(query).tolist(), k, fetch_k, lambda_mult, filter, **kwargs
        )

    # -- construction -------------------------------------------------------------------------------------------
    @classmethod
    def from_texts(
        cls, texts: list[str], embedding: Embeddings, metadatas: list[dict[str, Any]] | None = None, *,
        ids: list[str] | None = None, kb: VectorStoreTarget | None = None, **kwargs: Any,
    ) -> KnowledgeBaseVectorStore:
        """A store over `kb` holding `texts` (`embedding` must be the model `kb` was opened with)."""
        _no_extra("from_texts", kwargs)
        if kb is None:  # opening one here would make this module import the facade (a cycle)
            raise ValueError("from_texts: give kb=, the knowledge base to add to, e.g. "
                             "kb=KnowledgeBase.open('langchain', embeddings=embedding)")
        store = cls(kb)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def as_retriever(self, **kwargs: Any) -> KnowledgeBaseVectorStoreRetriever:
        """LangChain's `VectorStoreRetriever` (``search_type``: similarity, mmr, similarity_score_threshold;
        ``search_kwargs``), also taking ``k`` and ``filter`` directly."""
        tags = kwargs.pop("tags", None) or []
        tags.extend(self._get_retriever_tags())
        return KnowledgeBaseVectorStoreRetriever(vectorstore=self, tags=tags, **kwargs)


class KnowledgeBaseVectorStoreRetriever(VectorStoreRetriever):
    """`VectorStoreRetriever` that also takes ``k`` and ``filter`` as constructor arguments and rejects unknown ones.

    Per call ``invoke(q, k=2, filter={...})`` works as in LangChain (the arguments join ``search_kwargs``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _k_and_filter(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not ({"k", "filter"} & set(data)):
            return data
        data = dict(data)
        search_kwargs = dict(data.get("search_kwargs") or {})
        for name in ("k", "filter"):
            if name in data:
                search_kwargs[name] = data.pop(name)
        data["search_kwargs"] = search_kwargs
        return data

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return super()._get_relevant_documents(query, run_manager=run_manager, **_flat(kwargs))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return await super()._aget_relevant_documents(query, run_manager=run_manager, **_flat(kwargs))


def _flat(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Per-call ``search_kwargs={...}`` merged into the keyword arguments (the FAISS retriever spelling)."""
    if "search_kwargs" not in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    nested = kwargs.pop("search_kwargs") or {}
    both = sorted(set(nested) & set(kwargs))
    if both:
        raise ValueError(f"{both} given both directly and in search_kwargs")
    return {**kwargs, **nested}
