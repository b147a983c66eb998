"""The runnables the HTTP endpoint serves, with typed inputs and outputs; plain LangChain, no LangServe needed.

Each builder returns a `Runnable` with ``with_types(...)`` so a schema (and LangServe's playground form) exists, and
validates its input early (a ``ValueError`` naming the bad value, which the server maps to HTTP 400).

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.server.runnables import ask_runnable, search_runnable
    from ctxrag.models.chat import make_chat_model
    kb = KnowledgeBase.open("demo")
    search_runnable([kb]).invoke("星河知识库支持哪些文件格式？")          # list[Document]
    ask_runnable([kb], make_chat_model()).invoke({"question": "默认端口是多少？"})["answer"]
"""
from __future__ import annotations

import asyncio
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator, Literal, Sequence

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableConfig, RunnableGenerator, RunnableLambda
from langchain_core.runnables.utils import AddableDict
from pydantic import BaseModel, Field

from ctxrag.chains.ask import RagAnswer, build_ask_chain
from ctxrag.chains.rag import OnInstruction
from ctxrag.chains.assistant import build_assistant_chain
from ctxrag.enums import SearchMode
from ctxrag.errors import DocumentNotFound
from ctxrag.kb.notes import NoteBook
from ctxrag.retrievers.factory import make_multi_kb_retriever
from ctxrag.retrievers.modes import DEFAULT_MODE
from ctxrag.text import check_query

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.kb import KnowledgeBaseProtocol

DEFAULT_MAX_QUERY_CHARS = 4000
"""The query length limit when none is given (``Settings.max_query_chars`` in the server)."""
EXPOSE_PATHS_KEY = "ctxrag_expose_paths"
"""Config metadata (and ``configurable``) key: True lets the runnables send absolute source paths; False or missing
sends file names only."""

Role = Literal["human", "user", "ai", "assistant", "system"]


class AskInput(BaseModel):
    """A question for the RAG chain, with optional earlier turns."""

    question: str = Field(..., min_length=1, description="The question (at most max_query_chars characters).")
    history: list[tuple[Role, str]] = Field(default_factory=list, description="Earlier turns as (role, text).")


AskOutput = RagAnswer
"""The ``/ask`` output: `ctxrag.chains.ask.RagAnswer` (the name is kept for the server's schema)."""


class ChatInput(BaseModel):
    """A turn for the routing assistant."""

    question: str = Field(..., min_length=1, description="The question or message (at most max_query_chars).")
    selected_doc_ids: list[str] = Field(default_factory=list, description="Restrict answers to these documents.")
    history: list[tuple[Role, str]] = Field(default_factory=list, description="Earlier turns as (role, text).")
    allow_general_knowledge: bool = Field(False, description="Answer from general knowledge when the KB has nothing.")


class ChatOutput(RagAnswer):
    """The assistant's turn: `RagAnswer` with the route decision and the standalone question it answered."""

    route: str = ""
    decision: dict[str, Any] = Field(default_factory=dict)
    standalone_question: str = ""
    supported: bool | None = None
    """True: answered from the knowledge base (the rag route passed the gate and the evidence check); False: the
    knowledge base has nothing on it (``decision["reason"]`` says why); None: chat or document summary."""


class NotesInput(BaseModel):
    """One notes operation: ``add`` a note (text, title, tags), ``search`` notes (query, tag, k) or ``list`` them (tag).

    Empty strings mean "not given" (no ``null``s: the playground's form cannot render optional fields)."""

    action: Literal["add", "search", "list"] = Field("search", description="add | search | list")
    text: str = Field("", max_length=20000, description="add: the note's text.")
    title: str = Field("", max_length=200, description="add: a title (default: the first line).")
    tags: list[str] = Field(default_factory=list, description="add: tags.")
    query: str = Field("", max_length=4000, description="search: what to look for.")
    tag: str = Field("", max_length=40, description="search/list: only notes with this tag.")
    k: int = Field(5, ge=1, le=50, description="search: how many notes.")


class NotesOutput(BaseModel):
    """Notes touched by the operation (``score`` set for search hits)."""

    action: str
    notes: list[dict[str, Any]] = Field(default_factory=list)


def _question_checker(max_chars: int) -> Runnable[Any, Any]:
    """Refuses a blank or over-long ``question`` (a `QueryError`, HTTP 400) before any model or index runs."""

    def check(inp: Any) -> Any:
        if isinstance(inp, BaseModel):
            inp = inp.model_dump()
        if isinstance(inp, dict):
            return {**inp, "question": check_query(inp.get("question"), max_chars, what="question")}
        return check_query(inp, max_chars, what="question")

    return RunnableLambda(check, name="check_question")


def _short_source(source: str) -> str:
    """An absolute file path -> its file name; URIs (``note://``) and relative names stay as they are."""
    return os.path.basename(source) if os.path.isabs(source) else source


def hide_paths(value: Any) -> Any:
    """`value` with every ``source`` (Document metadata, source dicts, JSON-patch ops on a ``.../source`` path) cut
    to its file name; copies, never mutates.

    >>> hide_paths({"sources": [{"n": 1, "source": "/home/ann/docs/a.md"}]})
    {'sources': [{'n': 1, 'source': 'a.md'}]}
    """
    if isinstance(value, Document):
        return value.model_copy(update={"metadata": hide_paths(value.metadata)})
    if isinstance(value, dict):
        out = type(value)({k: _short_source(v) if k == "source" and isinstance(v, str) else hide_paths(v)
                           for k, v in value.items()})
        if isinstance(out.get("path"), str) and out["path"].endswith("/source") and isinstance(out.get("value"), str):
            out["value"] = _short_source(out["value"])  # a stream_log patch that sets one source
        return out
    if isinstance(value, list):
        return [hide_paths(v) for v in value]
    if type(value) is tuple:
        return tuple(hide_paths(v) for v in value)
    return value


# an absolute POSIX path inside free text (not a URL's path: no ':' or '/' or a word character right before it)
_PATH_IN_TEXT = re.compile(r"(?<![\w.~:/-])/(?:[^/\s\"'()\[\],;:]+/)+([^/\s\"'()\[\],;:]+)")


def hide_paths_in_text(value: Any) -> Any:
    """`hide_paths`, and every absolute path inside any string cut to its file name (for the intermediate-step
    streams, whose prompts quote ``(source: Title, /abs/path)``); JSON-like values only.

    >>> hide_paths_in_text({"text": "(source: FAQ, /srv/kb/faq.md) see https://x.org/a/b"})
    {'text': '(source: FAQ, faq.md) see https://x.org/a/b'}
    """
    if isinstance(value, str):
        return _PATH_IN_TEXT.sub(r"\1", value)
    if isinstance(value, dict):
        return {k: hide_paths_in_text(v) for k, v in hide_paths(value).items()}
    if isinstance(value, list):
        return [hide_paths_in_text(v) for v in value]
    return value


def _exposes_paths(config: RunnableConfig | None) -> bool:
    """Whether this request may see absolute paths: the flag the server put into the request's config metadata or,
    where LangServe keeps only ``configurable`` (``/batch``), there. A missing flag hides them (fail closed)."""
    config = config or {}
    for part in ("metadata", "configurable"):
        flag = (config.get(part) or {}).get(EXPOSE_PATHS_KEY)  # type: ignore[attr-defined]
        if flag is not None:
            return bool(flag)
    return False


def _path_filter() -> Runnable[Any, Any]:
    """Passes outputs (and stream chunks) through, cut by `hide_paths` when the request's config says so."""

    def transform(chunks: Iterator[Any], config: RunnableConfig) -> Iterator[Any]:
        expose = _exposes_paths(config)
        for chunk in chunks:
            yield chunk if expose else hide_paths(chunk)

    async def atransform(chunks: AsyncIterator[Any], config: RunnableConfig) -> AsyncIterator[Any]:
        expose = _exposes_paths(config)
        async for chunk in chunks:
            yield chunk if expose else hide_paths(chunk)

    # langchain-core's annotations leave out the config argument its runtime passes to a generator that takes one
    return RunnableGenerator(transform, atransform, name="source_paths")  # type: ignore[arg-type]


def search_runnable(kbs: Sequence[KnowledgeBaseProtocol], *, mode: SearchMode | str = DEFAULT_MODE, k: int = 5,
                    max_query_chars: int = DEFAULT_MAX_QUERY_CHARS) -> Runnable[Any, Any]:
    """Query string -> ranked chunks (`Document` with ``score`` metadata) over the knowledge bases `kbs`."""

    retriever = make_multi_kb_retriever(list(kbs), mode=mode, k=k)

    def check(query: Any) -> str:
        return check_query(query, max_query_chars)

    chain = RunnableLambda(check, name="check_query") | retriever | _path_filter()
    chain.name = "search_query"  # names the playground's input field
    return chain.with_types(input_type=str, output_type=list[Document]).with_config(run_name="ctxrag_search")


def ask_runnable(kbs: Sequence[KnowledgeBaseProtocol], llm: BaseChatModel, *, mode: SearchMode | str = DEFAULT_MODE,
                 k: int = 4, rerank: str = "none", max_query_chars: int = DEFAULT_MAX_QUERY_CHARS, gate: bool = True,
                 evidence: bool = True, on_instruction: OnInstruction | None = None) -> Runnable[Any, Any]:
    """`ctxrag.chains.ask.build_ask_chain` over the knowledge bases `kbs`, typed for serving: the question checked
    first, source paths cut by the request's policy. ``on_instruction``: None follows ``answer_on_instruction``."""

    chain = build_ask_chain(list(kbs), llm, mode=mode, k=k, rerank=rerank, gate=gate, evidence=evidence,
                            on_instruction=on_instruction)
    chain = _question_checker(max_query_chars) | chain | _path_filter()
    return chain.with_types(input_type=AskInput, output_type=AskOutput)


def streaming_adapter(runnable: Runnable[Any, Any], *, name: str) -> Runnable[Any, Any]:
    """Wrap a runnable whose ``stream`` is a plain sync generator (the `Assistant`) so ``astream`` streams too.

    The sync stream runs in a worker thread and its chunks cross to the event loop one by one; when the async
    consumer goes away (a client hung up) the worker stops at the next chunk. Chunks become `AddableDict`s so
    ``invoke`` merges them into one answer.
    """

    def stream(inp: Any, config: RunnableConfig) -> Iterator[AddableDict]:
        for chunk in runnable.stream(inp, config):
            yield AddableDict(chunk)

    async def astream(inp: Any, config: RunnableConfig) -> AsyncIterator[AddableDict]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def work() -> None:
            try:
                gen = runnable.stream(inp, config)
                try:
                    for chunk in gen:
                        if stop.is_set():
                            break
                        loop.call_soon_threadsafe(queue.put_nowait, ("chunk", chunk))
                finally:
                    close = getattr(gen, "close", None)
                    if close is not None:
                        close()
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))
            else:
                loop.call_soon_threadsafe(queue.put_nowait, ("done", None))

        worker = loop.run_in_executor(None, work)
        try:
            while True:
                kind, value = await queue.get()
                if kind == "chunk":
                    yield AddableDict(value)
                elif kind == "error":
                    raise value
                else:
                    break
        finally:
            stop.set()  # the worker ends at its next chunk; nobody waits for it (a cancelled stream must not block)
            del worker

    # as above: an async generator taking the config is what RunnableLambda runs, not what its annotations list
    return RunnableLambda(stream, afunc=astream, name=name)  # type: ignore[arg-type]


def chat_runnable(kb: KnowledgeBaseProtocol, llm: BaseChatModel, *, k: int = 4, router: str = "fast",
                  max_query_chars: int = DEFAULT_MAX_QUERY_CHARS, evidence: bool = True,
                  on_instruction: OnInstruction | None = None) -> Runnable[Any, Any]:
    """The routing assistant (`ctxrag.chains.assistant.Assistant`) over `kb`, streaming sync and async, typed.

    Unknown ``selected_doc_ids`` raise `DocumentNotFound` naming them (HTTP 404) before the assistant runs."""

    bot = build_assistant_chain(kb, llm, router=router, k=k, evidence=evidence, on_instruction=on_instruction)

    def check_selected(inp: Any) -> Any:
        selected = inp.get("selected_doc_ids") if isinstance(inp, dict) else None
        if isinstance(selected, list):
            unknown = [d for d in selected if isinstance(d, str) and kb.documents.get_document(d) is None]
            if unknown:
                raise DocumentNotFound(f"unknown selected_doc_ids {unknown} in knowledge base {kb.name!r} "
                                       f"(see `ctxrag doc list --kb {kb.name}`)")
        return inp

    chain = (_question_checker(max_query_chars) | RunnableLambda(check_selected, name="check_selected")
             | streaming_adapter(bot, name="ctxrag_chat") | _path_filter())
    return chain.with_types(input_type=ChatInput, output_type=ChatOutput)


WRITER_THREADS = 1
"""Threads of the executor that runs note adds (writes wait there for the knowledge base's write lock)."""


def notes_runnable(kb: KnowledgeBaseProtocol, *, max_query_chars: int = DEFAULT_MAX_QUERY_CHARS) -> Runnable[Any, Any]:
    """Add, search and list notes of `kb` (see `NotesInput`); returns `NotesOutput` as a dict.

    Served asynchronously, an ``add`` runs on its own small executor: while another process holds the write lock,
    waiting adds queue there instead of filling the event loop's shared thread pool, so searches never wait behind
    writes (before, a handful of waiting adds stalled every search)."""

    book = NoteBook(kb)
    writer = ThreadPoolExecutor(max_workers=WRITER_THREADS, thread_name_prefix=f"ctxrag-notes-{kb.name}")

    def validated(inp: Any) -> NotesInput:
        x = NotesInput.model_validate(inp)  # also when called directly without the server's validation
        if x.action == "add" and (not x.text or not x.text.strip()):
            raise ValueError("notes action 'add' needs a non-empty 'text'")
        return x

    def add(x: NotesInput) -> dict[str, Any]:
        note = book.create(x.text, title=x.title or None, tags=x.tags)
        return {"action": "add", "notes": [note.to_dict()]}

    def read(x: NotesInput) -> dict[str, Any]:
        if x.action == "search":
            query = x.query or x.text
            if not query or not query.strip():
                raise ValueError("notes action 'search' needs a non-empty 'query'")
            query = check_query(query, max_query_chars)
            return {"action": "search",
                    "notes": [{**n.to_dict(), "score": s} for n, s in book.search(query, k=x.k, tag=x.tag or None)]}
        return {"action": "list", "notes": [n.to_dict() for n in book.list(tag=x.tag or None)]}

    def run(inp: Any) -> dict[str, Any]:
        x = validated(inp)
        return add(x) if x.action == "add" else read(x)

    async def arun(inp: Any) -> dict[str, Any]:
        x = validated(inp)
        loop = asyncio.get_running_loop()
        if x.action == "add":
            return await loop.run_in_executor(writer, copy_context().run, add, x)
        return await loop.run_in_executor(None, copy_context().run, read, x)

    chain = RunnableLambda(run, afunc=arun, name="ctxrag_notes") | _path_filter()
    return chain.with_types(input_type=NotesInput, output_type=NotesOutput)
