"""`ctxrag.models.warm`: one background model process, reused by later commands, replying as the in-process model.

Real processes and a real model (the 0.5B: these tests are about the mechanics, not answer quality). The model
process's own code runs in two ways: as a real process with its model load and generation replaced (`STAND_IN`: the
tests of starting once, the state file and the idle exit), and as `serve_warm_model` on a thread of this test process
with the real 0.5B that this process (the run's one in-process model worker) has loaded already (the tests of the
replies, the prompt prefix, the token and two real `ctxrag ask` processes using it), so the module adds no chat model
load to the run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from ctxrag.models.chat import make_chat_model
from ctxrag.models.llamacpp import PROMPT_BATCH, LocalLlamaChatModel
from ctxrag.models.warm import (
    WarmChatModel,
    _state_path,
    serve_warm_model,
    stop_warm_models,
    warm_dir,
    warm_processes,
)
from ctxrag.testing.llm_server import HANG_GUARD_S

N_CTX = 4096
PROMPT = "Name three colours."
START = ("import json, sys; from ctxrag.models.warm import ensure_warm_process; sys.executable = sys.argv[3]; "
         "s = ensure_warm_process(sys.argv[1], int(sys.argv[2]), None, 600.0); print(json.dumps(s['pid']))")
"""A command that finds or starts the warm model process, started by ``sys.argv[3]`` (the stand-in's Python)."""


def _exited(pid: int) -> bool:
    """Gone, or a zombie (exited; its parent, which may be a reaper that is not this process, has not reaped it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + HANG_GUARD_S  # a hang guard, not a speed limit
    while time.monotonic() < deadline:
        if _exited(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def warm_home(tmp_path_factory: pytest.TempPathFactory, small_model_path: Path) -> Iterator[Path]:
    """One home for the module with the 0.5B served warm from a thread of this process (`serve_warm_model`, the
    model process's code, on the model this process loads once); stopped at the end."""
    from ctxrag.settings import get_settings

    home = tmp_path_factory.mktemp("warm-home")
    old = os.environ.get("CTXRAG_HOME")
    os.environ["CTXRAG_HOME"] = str(home)
    get_settings.cache_clear()
    state = _state_path(str(small_model_path), N_CTX, None)
    server = threading.Thread(target=serve_warm_model, args=(state, str(small_model_path), N_CTX, None, 600.0),
                              name="warm-model-server", daemon=True)
    server.start()
    try:
        deadline = time.monotonic() + HANG_GUARD_S  # a hang guard, not a speed limit
        while not warm_processes():
            assert server.is_alive() and time.monotonic() < deadline, "the warm model server did not start"
            time.sleep(0.1)
        yield home
    finally:
        get_settings.cache_clear()
        os.environ["CTXRAG_HOME"] = str(home)
        assert stop_warm_models() == [os.getpid()]
        server.join(HANG_GUARD_S)
        if old is None:
            os.environ.pop("CTXRAG_HOME", None)
        else:
            os.environ["CTXRAG_HOME"] = old
        get_settings.cache_clear()
        assert not server.is_alive() and not state.exists()  # stopped, and it removed its state file


@pytest.fixture
def home(warm_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CTXRAG_HOME", str(warm_home))
    from ctxrag.settings import get_settings

    get_settings.cache_clear()
    return warm_home


def test_the_warm_reply_is_the_in_process_reply_whole_streamed_and_as_a_tool_call(home: Path,
                                                                                  small_model_path: Path) -> None:
    fields = {"model_path": str(small_model_path), "n_ctx": N_CTX, "max_tokens": 12}
    warm, local = WarmChatModel(**fields), LocalLlamaChatModel(**fields)
    whole = warm.invoke(PROMPT)
    assert whole.content and whole.content == local.invoke(PROMPT).content
    assert "".join(str(c.content) for c in warm.stream(PROMPT)) == whole.content
    assert whole.response_metadata["finish_reason"] in ("stop", "length")

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    call = warm.bind_tools([add], tool_choice="add", max_tokens=40).invoke("What is 2 plus 3?")
    assert [c["name"] for c in call.tool_calls] == ["add"] and set(call.tool_calls[0]["args"]) == {"a", "b"}
    same = local.bind_tools([add], tool_choice="add", max_tokens=40).invoke("What is 2 plus 3?")
    assert call.tool_calls[0]["args"] == same.tool_calls[0]["args"]
    assert [p["pid"] for p in warm_processes()] == [os.getpid()]  # still the one server


NOTES = SystemMessage("Answer from these notes only.\n" + "\n".join(
    f"Note {i}: the shipment {i} left the port of Ningbo on day {i} with {i * 3} crates of tea." for i in range(1, 50)))


def test_the_warm_process_keeps_the_prompt_prefix_between_calls(home: Path, small_model_path: Path) -> None:
    """Two commands asking over the same system message (the ask chain's instructions and chunks): the second call
    reuses the notes' whole batches of llama.cpp's context (`ctxrag.models.llamacpp_prefix`) and evaluates what
    follows them; llama.cpp's counters come back with each reply."""
    warm = WarmChatModel(model_path=str(small_model_path), n_ctx=N_CTX, max_tokens=4)
    first = warm.invoke([NOTES, HumanMessage("How many crates left on day 3?")])
    second = warm.invoke([NOTES, HumanMessage("Which port did shipment 7 leave from?")])
    t1, t2 = first.response_metadata["timings"], second.response_metadata["timings"]
    assert t1["prompt_eval_tokens"] > 1024 and t1["decode_tokens"] > 0 and t1["prompt_eval_s"] > 0
    assert second.usage_metadata["input_tokens"] > 1024
    # the notes' whole batches of `PROMPT_BATCH` tokens are not read again: only the rest of the last one, and the
    # question with the chat template's few tokens after it
    assert 0 < t2["prompt_eval_tokens"] < PROMPT_BATCH + 32


def test_a_request_without_the_token_is_refused(home: Path, small_model_path: Path) -> None:
    WarmChatModel(model_path=str(small_model_path), n_ctx=N_CTX, max_tokens=2).invoke("hi")
    [proc] = warm_processes()
    url = proc["url"]
    assert httpx.get(f"{url}/health", timeout=10).status_code == 401
    refused = httpx.post(f"{url}/generate", json={"messages": []}, headers={"Authorization": "Bearer guess"},
                         timeout=10)
    assert refused.status_code == 401


STAND_IN = """\
import runpy, sys
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from ctxrag.models.llamacpp import LocalLlamaChatModel

# ctxrag.models.warm's own process (server, token, idle watch, state file) with no model behind it
LocalLlamaChatModel.load = lambda self: None
LocalLlamaChatModel._generate = lambda self, messages, stop=None, run_manager=None, **kw: ChatResult(
    generations=[ChatGeneration(message=AIMessage("stand-in reply"))])
assert sys.argv[1:3] == ["-m", "ctxrag.models.warm"], sys.argv
sys.argv = [sys.argv[0], *sys.argv[3:]]
runpy.run_module("ctxrag.models.warm", run_name="__main__", alter_sys=True)
"""


@pytest.fixture
def model_free_warm_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The warm model process `ensure_warm_process` starts (``sys.executable -m ctxrag.models.warm ...``) runs
    without loading a model: the real process code, its model load and generation replaced (`STAND_IN`). For the
    tests about the process's life, not its replies (the real model is served by the module's other tests). Yields
    the real Python."""
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN, encoding="utf-8")
    python = tmp_path / "python-stand-in"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    real = sys.executable
    monkeypatch.setattr(sys, "executable", str(python))
    return real


@pytest.mark.slow  # real Python processes (the model-free stand-in): out of the fast lane, as before
def test_two_commands_starting_at_once_start_one_process_that_later_ones_reuse(model_free_warm_process: str,
                                                                               tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"not loaded by the stand-in")
    # each command is a real Python process whose `ensure_warm_process` starts the stand-in model process
    command = [model_free_warm_process, "-c", START, str(gguf), str(N_CTX), sys.executable]
    starts = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    pids = [json.loads(p.communicate()[0]) for p in starts]
    assert [p.returncode for p in starts] == [0, 0]
    assert pids[0] == pids[1]
    later = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    assert json.loads(later.stdout) == pids[0]
    assert [p["pid"] for p in warm_processes()] == [pids[0]]
    state = next(warm_dir().glob("*.json"))
    assert state.stat().st_mode & 0o077 == 0  # the token is readable by its owner only
    assert stop_warm_models() == [pids[0]] and _gone(pids[0])


@pytest.mark.slow  # real Python processes (the model-free stand-in): out of the fast lane, as before
def test_prestart_starts_the_process_in_the_background_and_the_first_call_uses_it(model_free_warm_process: str,
                                                                                    tmp_path: Path) -> None:
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from ctxrag.models.chat import prestart_chat_model

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"not loaded by the stand-in")
    warm = WarmChatModel(model_path=str(gguf), n_ctx=N_CTX, max_tokens=2)
    assert warm_processes() == []
    warm.prestart().join(HANG_GUARD_S)
    [proc] = warm_processes()  # started before any call
    assert warm.invoke("hi").content == "stand-in reply"
    assert [p["pid"] for p in warm_processes()] == [proc["pid"]]  # the call used it
    prestart_chat_model(GenericFakeChatModel(messages=iter([AIMessage("x")])))  # any other model: nothing to do
    assert stop_warm_models() == [proc["pid"]] and _gone(int(proc["pid"]))


def test_the_process_exits_by_itself_after_its_idle_time(model_free_warm_process: str, tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"not loaded by the stand-in")
    reply = WarmChatModel(model_path=str(gguf), n_ctx=N_CTX, max_tokens=2, idle_s=1).invoke("hi")
    assert reply.content == "stand-in reply"  # the process this call started answered it
    [proc] = warm_processes()
    assert _gone(int(proc["pid"]))
    assert list(warm_dir().glob("*.json")) == []  # it removed its state file


def test_ctxrag_ask_twice_in_a_row_uses_the_one_warm_process(home: Path, small_model_path: Path) -> None:
    """Two real `ctxrag ask` processes: the second finds the model loaded (the same process answers) and answers
    the same."""
    from ctxrag import demo_corpus

    env = {**os.environ, "CTXRAG_HOME": str(home), "CTXRAG_LLM__MODEL_PATH": str(small_model_path),
           "CTXRAG_LLM__N_CTX": str(N_CTX), "CTXRAG_LLM__MAX_TOKENS": "24", "CTXRAG_LLM__WARM_IDLE_S": "600"}
    run = [sys.executable, "-m", "ctxrag.cli.main"]
    subprocess.run([*run, "ingest", str(demo_corpus()), "--kb", "demo", "--no-contextualize"], env=env, check=True,
                   capture_output=True)
    answers, pids = [], []
    for _ in range(2):
        out = subprocess.run([*run, "ask", "团队版包含多少存储空间？", "--kb", "demo", "--json"], env=env, check=True,
                             capture_output=True, text=True).stdout
        answers.append(json.loads(out)["answer"])
        pids.append([p["pid"] for p in warm_processes()])
    assert answers[0] and answers[0] == answers[1]
    assert len(pids[0]) == 1 and pids[0] == pids[1]  # the second command found the model loaded


def test_the_cli_gets_a_warm_model_unless_it_is_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"not loaded here")
    monkeypatch.setenv("CTXRAG_LLM__MODEL_PATH", str(gguf))
    monkeypatch.delenv("CTXRAG_LLM__WARM_IDLE_S")  # the test run turns it off (conftest); the default is on
    from ctxrag.settings import get_settings

    get_settings.cache_clear()
    assert type(make_chat_model(warm=True)) is WarmChatModel
    assert type(make_chat_model()) is LocalLlamaChatModel  # the Python API loads in its own process
    monkeypatch.setenv("CTXRAG_LLM__WARM_IDLE_S", "0")
    get_settings.cache_clear()
    assert type(make_chat_model(warm=True)) is LocalLlamaChatModel


def test_a_call_that_finds_the_process_going_away_starts_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a process that reaches its idle time between a call reading its state and connecting drops the connection
    # before any reply: the call asks again (here the same server, which answers the second time) instead of failing
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from langchain_core.messages import AIMessage, message_to_dict

    from ctxrag.settings import get_settings

    monkeypatch.setenv("CTXRAG_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()
    posts: list[int] = []

    class Going(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # /health: the process looks alive when the call reads its state
            self.send_response(200)
            self.end_headers()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            posts.append(1)
            if len(posts) == 1:  # going away: the connection closes with no reply
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.send_response(200)
            self.end_headers()
            line = {"message": message_to_dict(AIMessage("second try"))}
            self.wfile.write((json.dumps(line) + "\n").encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Going)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        gguf = tmp_path / "m.gguf"
        gguf.write_bytes(b"never loaded")
        path = _state_path(str(gguf), N_CTX, None)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"url": f"http://127.0.0.1:{server.server_address[1]}", "pid": os.getpid(),
                                    "token": "t", "model_path": str(gguf), "n_ctx": N_CTX}))
        reply = WarmChatModel(model_path=str(gguf), n_ctx=N_CTX, max_tokens=2, idle_s=1).invoke("hi")
    finally:
        server.shutdown()
        get_settings.cache_clear()
    assert reply.content == "second try" and len(posts) == 2
