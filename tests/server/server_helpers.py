"""Helpers for the endpoint tests (imported by module name: the test folders are not packages): a real uvicorn
server in a thread on 127.0.0.1, a fact corpus with one checkable answer per question, and a chat model that answers
only from the facts it finds in its prompt."""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from ctxrag.testing.llm_server import free_port

from ctxrag.settings import LLMSettings, ServerSettings, Settings


def server_settings(home: Path, **server: Any) -> Settings:
    """Explicit settings (no LLM from settings, the given server options): nothing leaks in from the shell."""
    return Settings(home=home, llm=LLMSettings(provider="none"), server=ServerSettings(**server))

# 50 lockers, each with its own code: a client asking about one locker must get exactly that locker's code back
LOCKER_NAMES = [
    "Amber", "Birch", "Cedar", "Dune", "Ember", "Fjord", "Garnet", "Harbor", "Iris", "Juniper",
    "Kestrel", "Lagoon", "Maple", "Nectar", "Onyx", "Pebble", "Quartz", "Raven", "Saffron", "Tundra",
    "Umber", "Violet", "Willow", "Xenon", "Yarrow", "Zephyr", "Aspen", "Basalt", "Coral", "Delta",
    "Falcon", "Glacier", "Hazel", "Indigo", "Jasper", "Kelp", "Lotus", "Meadow", "Nimbus", "Orchid",
    "Prairie", "Quill", "Reef", "Sierra", "Thistle", "Upland", "Vortex", "Walnut", "Yucca", "Zinnia",
]


def locker_code(i: int) -> str:
    return f"K{(i * 7919) % 9973:04d}-{chr(65 + i % 26)}{chr(65 + (i * 5) % 26)}"


def write_locker_corpus(folder: Path) -> dict[str, str]:
    """One small Markdown file per locker; returns name -> code."""
    folder.mkdir(parents=True, exist_ok=True)
    codes = {}
    for i, name in enumerate(LOCKER_NAMES):
        code = locker_code(i)
        codes[name] = code
        (folder / f"locker_{name.lower()}.md").write_text(
            f"# Locker {name}\n\nThe access code of locker {name} is {code}. "
            f"Locker {name} stands in hall {i % 5 + 1} of the depot.\n", encoding="utf-8")
    return codes


def locker_question(name: str) -> str:
    return f"What is the access code of locker {name}?"


_QUESTION = re.compile(r"access code of locker (\w+)\?")


class FactEchoChatModel(BaseChatModel):
    """Answers "The access code of locker X is CODE [n]." when the prompt's knowledge holds X's code, else
    "I do not know." So an answer is right only if retrieval put the right chunk into this very prompt."""

    delay_s: float = 0.0
    """Pretend generation time per reply, so concurrent requests overlap."""

    @property
    def _llm_type(self) -> str:
        return "fact-echo"

    def _reply(self, messages: list[BaseMessage]) -> str:
        text = "\n".join(str(m.content) for m in messages)
        asked = _QUESTION.findall(text)
        if not asked:
            return "I do not know."
        name = asked[-1]
        blocks = re.split(r"\n(?=\[\d+\] )", text)
        for block in blocks:
            m = re.match(r"\[(\d+)\] ", block)
            found = re.search(rf"locker {re.escape(name)} is ([A-Z0-9-]+)\.", block)
            if m and found:
                return f"The access code of locker {name} is {found.group(1)} [{m.group(1)}]."
        return "I do not know."

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        if self.delay_s:
            time.sleep(self.delay_s)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self._reply(messages)))])

    def _stream(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        if self.delay_s:
            time.sleep(self.delay_s)
        for word in re.findall(r"\S+\s*", self._reply(messages)):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word))
            if run_manager is not None:
                run_manager.on_llm_new_token(word, chunk=chunk)
            yield chunk


class FailingChatModel(BaseChatModel):
    """Raises the given exception on every call (to check the server's 5xx answers)."""

    error: Any = None

    @property
    def _llm_type(self) -> str:
        return "failing"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        raise self.error


@contextmanager
def run_uvicorn(app: Any, *, startup_timeout: float = 30.0, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `app` with a real uvicorn on 127.0.0.1 (a free port) in a thread; yield ``http://127.0.0.1:PORT``.

    `host` binds elsewhere (``0.0.0.0``: also reachable on the machine's other addresses)."""
    import uvicorn

    _reset_sse_exit_event()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"uvicorn on port {port} exited at start")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"uvicorn on port {port} did not start in {startup_timeout:.0f} s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        _reset_sse_exit_event()


def _reset_sse_exit_event() -> None:
    """sse-starlette 1.x (LangServe pins <2) keeps one process-wide exit Event bound to the first event loop that
    streamed; each test server runs its own loop, so clear it between servers (one server at a time)."""
    try:
        from sse_starlette.sse import AppStatus
    except ImportError:  # pragma: no cover
        return
    AppStatus.should_exit_event = None
