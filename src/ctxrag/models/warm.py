"""A warm local chat model: one background process keeps the GGUF loaded between CLI commands.

Every ``ctxrag ask`` is a new process; loading the 1.5B and reading the same system prompt again in each one is time a
user waits for before the first token. `WarmChatModel` is a `LocalLlamaChatModel` whose generation runs in a model
process on 127.0.0.1: the first call starts it (and pays the load once), later calls in any process reuse it, and it
exits by itself after ``idle_s`` seconds without a request. The process runs the same `LocalLlamaChatModel` code
(grammars, tool turns, loop guard, logprobs), so a reply is the one the in-process model gives; only the messages and
the chunks travel (LangChain's message dicts). llama.cpp reuses the prompt prefix the previous request left in its
context, in whole batches only (`ctxrag.models.llamacpp_prefix`: a reply depends on its prompt, not on the requests
before it), so most of the fixed system prompt is read once per process, not once per command.

One process per (model file, ``n_ctx``, ``n_threads``) and home; its state file (URL, pid, a random token every
request must carry) sits in ``<home>/warm/``, readable by its owner only. Two commands starting one at the same moment
start it once (a file lock). ``CTXRAG_LLM__WARM_IDLE_S=0`` turns it off: the model loads in the command's process.

Example::

    from ctxrag.models.warm import WarmChatModel, stop_warm_models
    llm = WarmChatModel(model_path="model.gguf", max_tokens=8, idle_s=600)
    llm.invoke("2+2=").content           # starts the model process, or reuses the running one
    stop_warm_models()                   # stops this home's warm model processes
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, message_to_dict, messages_from_dict
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import Field

from ctxrag.errors import ModelError
from ctxrag.models.llamacpp import LocalLlamaChatModel

START_GUARD_S = 900.0
"""A hang guard for a model process that neither answers nor exits while it starts (not a performance limit)."""
_FIELDS = ("model_path", "n_ctx", "n_threads", "temperature", "max_tokens", "seed", "stop", "repeat_penalty",
           "loop_guard", "loop_limits", "model_name", "tool_turns")


def warm_dir() -> Path:
    """Where this home's warm model processes keep their state files: ``<home>/warm``."""
    from ctxrag.settings import get_settings

    return Path(get_settings().home) / "warm"


def _state_path(model_path: str, n_ctx: int, n_threads: int | None) -> Path:
    key = json.dumps([str(Path(model_path).expanduser().resolve()), int(n_ctx), n_threads])
    return warm_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and {"url", "pid", "token"} <= set(state) else None


def _alive(state: dict[str, Any]) -> bool:
    import httpx

    try:
        resp = httpx.get(f"{state['url']}/health", headers=_auth(state), timeout=5.0)
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


def _auth(state: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {state['token']}"}


CONNECT_RETRIES = 4
"""Times a call starts or finds the model process again when it cannot reach it before any reply (the process
exited on its idle time as the call found it)."""


def ensure_warm_process(model_path: str, n_ctx: int, n_threads: int | None, idle_s: float) -> dict[str, Any]:
    """The running model process for this model (started and loaded first when there is none): its state."""
    from filelock import FileLock

    path = _state_path(model_path, n_ctx, n_threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_suffix(".lock"))):
        state = _read_state(path)
        if state is not None and _alive(state):
            return state
        path.unlink(missing_ok=True)
        log = path.with_suffix(".log")
        cmd = [sys.executable, "-m", "ctxrag.models.warm", "--state", str(path), "--model-path", str(model_path),
               "--n-ctx", str(n_ctx), "--idle-s", str(idle_s)]
        if n_threads:
            cmd += ["--n-threads", str(n_threads)]
        with open(log, "wb") as fh:  # the child keeps its own handle
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # it outlives this command, and its Ctrl-C
        threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it exits before this process does
        deadline = time.monotonic() + START_GUARD_S
        while True:
            state = _read_state(path)
            if state is not None and state.get("pid") == proc.pid:
                return state
            if proc.poll() is not None:
                tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
                raise ModelError(f"the warm model process for {Path(model_path).name} exited with "
                                 f"{proc.returncode} while loading:\n{tail}")
            if time.monotonic() > deadline:
                proc.kill()
                raise ModelError(f"the warm model process for {Path(model_path).name} did not start in "
                                 f"{START_GUARD_S:.0f} s (log: {log})")
            time.sleep(0.1)


def warm_processes() -> list[dict[str, Any]]:
    """This home's running warm model processes: ``{"pid", "model_path", "n_ctx", "url"}`` each (no token)."""
    out = []
    for path in sorted(warm_dir().glob("*.json")):
        state = _read_state(path)
        if state is not None and _alive(state):
            out.append({k: state.get(k) for k in ("pid", "model_path", "n_ctx", "url")})
    return out


def stop_warm_models() -> list[int]:
    """Stop this home's warm model processes; the pids asked to stop."""
    import httpx

    stopped = []
    for path in sorted(warm_dir().glob("*.json")):
        state = _read_state(path)
        if state is None:
            continue
        try:
            httpx.post(f"{state['url']}/shutdown", headers=_auth(state), timeout=10.0)
            stopped.append(int(state["pid"]))
        except httpx.HTTPError:
            pass
        path.unlink(missing_ok=True)
    return stopped


class WarmChatModel(LocalLlamaChatModel):
    """`LocalLlamaChatModel` whose generation runs in the shared warm model process (see the module docstring).

    Example::

        llm = WarmChatModel(model_path="model.gguf", max_tokens=8)
        llm.invoke("2+2=").content
    """

    idle_s: float = Field(default=900.0, gt=0)
    """Seconds the model process stays loaded after its last request."""

    @property
    def _llm_type(self) -> str:
        return "ctxrag-llamacpp-warm"

    def prestart(self) -> threading.Thread:
        """Find or start the model process on a background thread now, so that its load overlaps the caller's own
        work (opening the knowledge base, retrieval); the first call then waits for it under the same lock. An
        error is left to that call to raise. Returns the (daemon) thread.

        Example::

            llm = WarmChatModel(model_path="model.gguf", max_tokens=8)
            llm.prestart()                       # loading now ...
            docs = retriever.invoke(question)     # ... while this runs
            llm.invoke(question)                  # waits for the load if it is not done
        """
        def start() -> None:
            try:
                ensure_warm_process(self.model_path, self.n_ctx, self.n_threads, self.idle_s)
            except Exception:  # noqa: BLE001 - the first call raises it with its context
                pass

        thread = threading.Thread(target=start, name="warm-model-prestart", daemon=True)
        thread.start()
        return thread

    def _request(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
                 stream: bool) -> Iterator[dict[str, Any]]:
        import httpx

        try:
            body = json.dumps({"fields": {f: _plain(getattr(self, f)) for f in _FIELDS},
                               "messages": [message_to_dict(m) for m in messages], "stop": stop, "kwargs": kwargs,
                               "stream": stream}, ensure_ascii=False)
        except TypeError as exc:
            raise ModelError(f"the warm model cannot send this call's options {sorted(kwargs)}: {exc}") from exc
        for attempt in range(CONNECT_RETRIES + 1):
            state = ensure_warm_process(self.model_path, self.n_ctx, self.n_threads, self.idle_s)
            replied = False
            try:
                with httpx.stream("POST", f"{state['url']}/generate", content=body.encode("utf-8"),
                                  headers={**_auth(state), "Content-Type": "application/json"},
                                  timeout=None) as resp:
                    if resp.status_code != 200:
                        raise ModelError(f"the warm model process answered HTTP {resp.status_code}: "
                                         f"{resp.read().decode('utf-8', 'replace')[:300]}")
                    for line in resp.iter_lines():
                        if not line:
                            continue
                        item = json.loads(line)
                        if "error" in item:
                            raise ModelError(item["error"])
                        replied = True
                        yield item
                return
            except httpx.HTTPError as exc:
                if not replied and attempt < CONNECT_RETRIES:
                    # it reached its idle time as this call found it (a busy machine can take longer than that
                    # between reading its state and connecting): start another, nothing was generated yet
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise ModelError(f"the warm model process at {state['url']} failed: {exc}") from exc

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        for item in self._request(messages, stop, kwargs, stream=False):
            message = _message(item["message"])
            assert isinstance(message, AIMessage)
            if run_manager and message.content:
                run_manager.on_llm_new_token(message.text)
            return ChatResult(generations=[ChatGeneration(message=message)])
        raise ModelError("the warm model process sent no reply")

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        for item in self._request(messages, stop, kwargs, stream=True):
            message = _message(item["chunk"])
            assert isinstance(message, AIMessageChunk)
            chunk = ChatGenerationChunk(message=message)
            if run_manager and message.text:
                run_manager.on_llm_new_token(message.text, chunk=chunk)
            yield chunk


def _message(data: dict[str, Any]) -> BaseMessage:
    return messages_from_dict([data])[0]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value.model_dump() if hasattr(value, "model_dump") else value


# ------------------------------------------------------------------------------------------- the model process


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, token: str, idle_s: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.token = token
        self.idle_s = idle_s
        self.active = 0
        self.last = time.monotonic()
        self.guard = threading.Lock()

    def touch(self, delta: int) -> None:
        with self.guard:
            self.active += delta
            self.last = time.monotonic()

    def idle_for(self) -> float:
        with self.guard:
            return 0.0 if self.active else time.monotonic() - self.last


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # the reply ends when the connection closes: lines stream as they are written

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _allowed(self) -> bool:
        if secrets.compare_digest(self.headers.get("Authorization", ""), f"Bearer {self.server.token}"):
            return True
        self.send_error(401)
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self._allowed():
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if not self._allowed():
            return
        if self.path == "/shutdown":
            self.send_response(200)
            self.end_headers()
            threading.Thread(target=self.server.shutdown, daemon=True).start()
            return
        if self.path != "/generate":
            self.send_error(404)
            return
        self.server.touch(+1)
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            try:
                for item in _serve(request):
                    self.wfile.write(json.dumps(item, ensure_ascii=False).encode("utf-8") + b"\n")
                    self.wfile.flush()
            except Exception as exc:  # noqa: BLE001 - the client raises it as a ModelError
                self.wfile.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode("utf-8") + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (Ctrl-C): closing the generator stopped generating
        finally:
            self.server.touch(-1)


def _serve(request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    model = LocalLlamaChatModel(**request["fields"])
    messages = messages_from_dict(request["messages"])
    stop, kwargs = request.get("stop"), request.get("kwargs") or {}
    if request.get("stream"):
        for chunk in model._stream(messages, stop, None, **kwargs):  # noqa: SLF001 - the same code path as in-process
            yield {"chunk": message_to_dict(chunk.message)}
    else:
        result = model._generate(messages, stop, None, **kwargs)  # noqa: SLF001
        yield {"message": message_to_dict(result.generations[0].message)}


def serve_warm_model(state_path: Path, model_path: str, n_ctx: int, n_threads: int | None, idle_s: float) -> None:
    """Load the model, write the state file, serve until ``idle_s`` without a request or a ``/shutdown``.

    What the model process runs (`main`); it returns when the server stops, its state file removed. In a process
    that has loaded the same model already (same file and ``n_ctx``), the load is that one
    (`LocalLlamaChatModel.load`), so a thread can serve a model the process holds.

    Example::

        import threading
        threading.Thread(target=serve_warm_model, args=(warm_dir() / "m.json", "model.gguf", 4096, None, 600.0),
                         daemon=True).start()
    """
    LocalLlamaChatModel(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads).load()
    server = _Server(secrets.token_urlsafe(24), idle_s)
    state = {"url": f"http://127.0.0.1:{server.server_address[1]}", "pid": os.getpid(), "token": server.token,
             "model_path": model_path, "n_ctx": n_ctx}
    state_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token is the owner's only
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    tmp.replace(state_path)

    stopped = threading.Event()

    def watch() -> None:
        while not stopped.wait(max(0.05, min(1.0, server.idle_s / 4))):
            if server.idle_for() >= server.idle_s:
                server.shutdown()
                return

    threading.Thread(target=watch, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        stopped.set()
        server.server_close()
        if (_read_state(state_path) or {}).get("token") == server.token:
            state_path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """Run one warm model process: `serve_warm_model` with the command line's arguments."""
    ap = argparse.ArgumentParser(description="ctxrag's warm local chat model process")
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--n-threads", type=int, default=None)
    ap.add_argument("--idle-s", type=float, required=True)
    args = ap.parse_args(argv)
    serve_warm_model(args.state, args.model_path, args.n_ctx, args.n_threads, args.idle_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
