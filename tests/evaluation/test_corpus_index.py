"""`CorpusSource` indexes a benchmark corpus as a knowledge base would: its BM25 follows ``Settings.bm25_stem``."""
from __future__ import annotations

import pytest

from ctxrag.evaluation.corpus_index import CorpusSource
from ctxrag.settings import EmbeddingSettings, Settings
from ctxrag.models.embeddings import make_embeddings


@pytest.mark.parametrize("stem", [False, True])
def test_keyword_index_stems_as_the_settings_say(tmp_path, stem: bool) -> None:
    settings = Settings(home=tmp_path, embeddings=EmbeddingSettings(provider="fake"), bm25_stem=stem)
    texts = {"a": "indexing the tables", "b": "copper wire"}
    source = CorpusSource("tiny", texts, embeddings=make_embeddings(settings), settings=settings)
    hits = source.keyword_index().search("indexes", 5)
    assert [c for c, _ in hits] == (["a"] if stem else [])
