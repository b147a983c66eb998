"""A benchmark corpus as a `KnowledgeSource`, so the evaluation builds its retrievers with the product's own factory.

A benchmark corpus is not a knowledge base: it has no documents to load or split, only chunk ids and texts. So
`CorpusSource` indexes the texts in memory with the index kinds a knowledge base keeps (`ctxrag.stores.registry`:
the configured dense store's FAISS default and `BM25ChunkIndex`; a `GraphIndex` when the dataset brings triplets) and
offers them through the same typed faces `kb.as_retriever()` reads. The runner then calls
`ctxrag.retrievers.factory.make_retriever` over it: every benchmark number is for the assembly users run.

Example::

    from ctxrag.evaluation.corpus_index import CorpusSource
    from ctxrag.retrievers.factory import make_retriever
    source = CorpusSource("tiny", {"a": "alpha", "b": "beta"}, embeddings=emb)
    make_retriever(source, mode="bm25", k=1).invoke("alpha")[0].id   # 'a'
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from ctxrag.errors import ConfigError
from ctxrag.models.embeddings import embed_array
from ctxrag.schema import CHUNK_ID, DOC_ID, TITLE
from ctxrag.settings import Settings, get_settings
from ctxrag.stores.base import IndexedChunk
from ctxrag.stores.bm25 import BM25ChunkIndex
from ctxrag.stores.vectors.dense import FaissIndex
from ctxrag.stores.documents.docstore import ChunkRecord, DocumentRecord, DocumentRow
from ctxrag.stores.embedding import attach_vectors
from ctxrag.stores.filters import MetadataFilter, matcher
from ctxrag.stores.graph import GraphIndex
from ctxrag.stores.protocols import ChunkScores, DenseIndex, KeywordIndex

EMBED_BATCH = 32

Index = TypeVar("Index")
"""An index kind a corpus builds on first use (`_index`)."""


def indexed_text(text: str, context: str | None) -> str:
    """What a contextual index sees: ``context + "\\n\\n" + chunk`` (the chunk alone without a context)."""
    return f"{context.strip()}\n\n{text}" if context and context.strip() else text


class QueryEmbeddings(Embeddings):
    """Passages through `cached` (a corpus is embedded once per model), queries through the model itself, so a
    configuration's latency includes embedding its query, as in real use. The vectors are the same either way."""

    def __init__(self, cached: Embeddings) -> None:
        self.cached = cached
        self.model: Embeddings = getattr(cached, "inner", cached)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.cached.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.model.embed_query(text)

    def embed_array(self, texts: list[str], *, is_query: bool = False) -> Any:
        return embed_array(self.model if is_query else self.cached, texts, is_query=is_query)


class CorpusChunks:
    """`ChunkLookup` over an in-memory corpus: chunk id -> text shown, and per-chunk metadata for filters."""

    def __init__(self, contents: Mapping[str, str], metadata: Mapping[str, dict[str, Any]] | None = None) -> None:
        self.contents = dict(contents)
        self.metadata = {cid: dict((metadata or {}).get(cid, {})) for cid in self.contents}

    def get_chunks(self, chunk_ids: Sequence[str], scores: ChunkScores | None = None) -> list[Document]:
        out = []
        for cid in chunk_ids:
            if cid not in self.contents:
                continue
            md = {**self.metadata[cid], CHUNK_ID: cid, **((scores or {}).get(cid, {}))}
            out.append(Document(page_content=self.contents[cid], id=cid, metadata=md))
        return out

    def allowed_chunk_ids(self, filter: MetadataFilter | None) -> set[str] | None:
        if filter is None:
            return None
        matches = matcher(filter)
        return {cid for cid, md in self.metadata.items() if matches(md)}


class CorpusDocuments:
    """`DocumentLookup` of a benchmark corpus whose chunks name their document (``metadata["doc_id"]``): each
    document is its chunks in corpus order, its title the chunks' ``title`` (SQuAD's article title) if any."""

    def __init__(self, texts: Mapping[str, str], contents: Mapping[str, str],
                 metadata: Mapping[str, dict[str, Any]]) -> None:
        self._chunks: dict[str, list[ChunkRecord]] = {}
        self._titles: dict[str, str] = {}
        for cid, text in texts.items():
            md = metadata.get(cid, {})
            doc_id = md.get(DOC_ID)
            if doc_id is None:
                continue
            rows = self._chunks.setdefault(str(doc_id), [])
            rows.append(ChunkRecord(cid, str(doc_id), len(rows), contents.get(cid, text), text, None, dict(md)))
            self._titles.setdefault(str(doc_id), str(md.get(TITLE) or ""))
        self._rows = [DocumentRow(d, d, self._titles[d], None, _hash(r.indexed_text for r in rows))
                      for d, rows in self._chunks.items()]

    def get_document(self, doc_id: str) -> DocumentRecord | None:
        rows = self._chunks.get(doc_id)
        if rows is None:
            return None
        text = "\n\n".join(r.content for r in rows)
        return DocumentRecord(doc_id, doc_id, self._titles[doc_id], _hash([text]), text, len(rows))

    def chunks_of(self, doc_id: str) -> list[ChunkRecord]:
        return list(self._chunks.get(doc_id, []))

    def list_documents(self) -> list[DocumentRecord]:
        return [d for d in (self.get_document(r.doc_id) for r in self._rows) if d is not None]

    def document_rows(self) -> list[DocumentRow]:
        return list(self._rows)

    def get_summary(self, doc_id: str) -> str | None:
        return "" if doc_id in self._chunks else None


def _hash(texts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") + b"\x00")
    return h.hexdigest()[:16]


class NoDocuments:
    """`DocumentLookup` of a benchmark corpus: chunks without documents."""

    def get_document(self, doc_id: str) -> None:
        return None

    def chunks_of(self, doc_id: str) -> list[Any]:
        return []

    def list_documents(self) -> list[Any]:
        return []

    def document_rows(self) -> list[Any]:
        return []

    def get_summary(self, doc_id: str) -> None:
        return None


GraphBuilder = Callable[[Embeddings], GraphIndex]


class CorpusSource:
    """A `KnowledgeSource` over ``texts`` (chunk id -> indexed text), indexes built on first use and timed.

    `contents` is each chunk's text as shown (default: `texts`); `graph` builds the graph index when a
    configuration asks for one (the dataset's triplets); `settings` is what the factory reads (fusion, graph
    ranking, rerankers).

    Example::

        source = CorpusSource("tiny", {"a": "alpha"}, embeddings=emb)
        source.keyword_index().search("alpha", 1)     # [('a', ...)]
    """

    root = Path(".")
    """Not a folder: a benchmark corpus lives in memory."""

    def __init__(self, name: str, texts: Mapping[str, str], *, embeddings: Embeddings,
                 contents: Mapping[str, str] | None = None, metadata: Mapping[str, dict[str, Any]] | None = None,
                 settings: Settings | None = None, graph: GraphBuilder | None = None,
                 progress: bool = False) -> None:
        self.name = name
        self.settings = settings or get_settings()
        self.texts = dict(texts)
        self._embeddings = embeddings
        self._chunks = CorpusChunks(contents if contents is not None else texts, metadata)
        self._graph_builder = graph
        self.progress = progress
        self.seconds: dict[str, float] = {}
        """Build time of each index built so far, by kind (``dense``, ``bm25``, ``graph``)."""
        self._built: dict[str, Any] = {}
        self._documents: CorpusDocuments | NoDocuments | None = None

    # ---- the KnowledgeSource faces
    @property
    def embeddings(self) -> Embeddings:
        return self._embeddings

    @property
    def chunks(self) -> CorpusChunks:
        return self._chunks

    @property
    def documents(self) -> CorpusDocuments | NoDocuments:
        """The documents the chunks name in ``metadata["doc_id"]``; none when no chunk names one."""
        if self._documents is None:
            docs = CorpusDocuments(self.texts, self._chunks.contents, self._chunks.metadata)
            self._documents = docs if docs.document_rows() else NoDocuments()
        return self._documents

    def dense_index(self) -> DenseIndex:
        return self._index("dense", self._build_dense)

    def keyword_index(self) -> KeywordIndex:
        return self._index("bm25", self._build_bm25)

    def graph_index(self) -> GraphIndex | None:
        builder = self._graph_builder
        if builder is None:
            return None
        return self._index("graph", lambda: builder(self._embeddings))

    def set_summaries(self, summaries: dict[str, str]) -> None:
        raise ConfigError(f"benchmark corpus {self.name!r} has no documents to summarize")

    # ---- building
    def index_seconds(self, kinds: Iterable[str]) -> float:
        """Seconds spent building these index kinds (building any not built yet)."""
        build = {"dense": self.dense_index, "bm25": self.keyword_index, "graph": self.graph_index}
        for kind in kinds:
            build[kind]()
        return sum(self.seconds.get(kind, 0.0) for kind in kinds)

    def _index(self, kind: str, build: Callable[[], Index]) -> Index:
        if kind not in self._built:
            start = time.perf_counter()
            self._built[kind] = build()
            self.seconds[kind] = time.perf_counter() - start
        return cast(Index, self._built[kind])  # what `build` made for this kind

    def _indexed(self) -> list[IndexedChunk]:
        return [IndexedChunk(cid, cid, text, self._chunks.contents[cid], dict(self._chunks.metadata[cid]))
                for cid, text in self.texts.items()]

    def _build_dense(self) -> FaissIndex:
        chunks = attach_vectors(self._indexed(), lambda batch: embed_array(self._embeddings, batch, is_query=False),
                                batch_size=EMBED_BATCH, progress=self.progress, desc="embedding corpus")
        index = FaissIndex(config=self.settings.dense_index)  # what a FAISS knowledge base makes
        index.add(chunks)
        return index

    def _build_bm25(self) -> BM25ChunkIndex:
        index = BM25ChunkIndex("mixed", stem=self.settings.bm25_stem)  # what a knowledge base's registry makes
        index.add(self._indexed())
        return index
