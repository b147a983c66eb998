"""Knowledge-base search and ask as agent tools: typed argument and result models, `KnowledgeTools` (the calls), and
LangChain `BaseTool`s built from them, so ``create_agent(model, tools=[kb.as_tool()])`` works.

The same models are the MCP server's tool schemas (`ctxrag.server.mcp_server`): one definition of what a tool takes
and gives, whichever door an agent comes through. Search never loads the chat model; ``ask`` loads it on first use.

Example::

    from langchain.agents import create_agent
    from ctxrag import KnowledgeBase
    from ctxrag.tools import make_ask_tool, make_search_tool
    kb = KnowledgeBase.open("demo")
    search = make_search_tool([kb])                      # or kb.as_tool()
    msg = search.invoke({"type": "tool_call", "id": "1", "name": search.name, "args": {"query": "默认端口？"}})
    msg.content, msg.artifact                            # ranked chunks as text; the Documents
    agent = create_agent(model, tools=[search])          # any tool-calling chat model
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Generic, Literal, Sequence, TypeVar

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from ctxrag.chains.ask import RagAnswer, build_ask_chain
from ctxrag.errors import ConfigError
from ctxrag.retrievers.factory import make_multi_kb_retriever
from ctxrag.settings import Settings, get_settings
from ctxrag.stores.protocols import KnowledgeSource
from ctxrag.text import check_query

Mode = Literal["dense", "bm25", "hybrid", "graph"]


class SearchQuery(BaseModel):
    """What an agent's search tool takes: a query (how many chunks is the tool's ``k``, set by the developer: a small
    model given the choice asks for one)."""

    query: str = Field(..., min_length=1, description="What to look for, in the knowledge base's language.")


class SearchArgs(SearchQuery):
    """A search over one served knowledge base or all of them: how many chunks, the mode and a metadata filter."""

    k: int | None = Field(None, ge=1, le=50, description="How many chunks to return (default: the server's k).")
    kb: str | None = Field(None, description="Knowledge base name (see list_knowledge_bases); default: all served.")
    mode: Mode | None = Field(None, description="dense | bm25 | hybrid | graph (default: the server's mode).")
    filter: dict[str, Any] | None = Field(
        None, description='Chunk metadata filter: key -> value or list of values, e.g. {"file_type": "markdown"}.')


class SearchHit(BaseModel):
    """One ranked chunk: where it comes from and its text."""

    chunk_id: str
    doc_id: str = ""
    kb: str = ""
    source: str = ""
    title: str = ""
    heading_path: str = ""
    score: float | None = None
    text: str = ""

    @classmethod
    def from_document(cls, doc: Document) -> "SearchHit":
        md = doc.metadata
        score = md.get("score")
        return cls(chunk_id=str(md.get("chunk_id", "")), doc_id=str(md.get("doc_id", "")), kb=str(md.get("kb", "")),
                   source=str(md.get("source", "")), title=str(md.get("title", "")),
                   heading_path=str(md.get("heading_path", "")),
                   score=float(score) if isinstance(score, (int, float)) else None, text=doc.page_content)


class SearchResult(BaseModel):
    """The ranked chunks for a query, best first."""

    query: str
    hits: list[SearchHit] = Field(default_factory=list)


class AskQuestion(BaseModel):
    """What an agent's ask tool takes: a question."""

    question: str = Field(..., min_length=1, description="The question, answered from the knowledge base with [n] "
                                                           "citations.")


class AskArgs(AskQuestion):
    """A question over one served knowledge base or all of them."""

    kb: str | None = Field(None, description="Knowledge base name (see list_knowledge_bases); default: all served.")
    k: int | None = Field(None, ge=1, le=20, description="Chunks given to the model (default: the server's k).")
    mode: Mode | None = Field(None, description="dense | bm25 | hybrid | graph (default: the server's mode).")


ChatModelSource = BaseChatModel | Callable[[], BaseChatModel] | None
KB = TypeVar("KB", bound=KnowledgeSource)
"""The knowledge bases a `KnowledgeTools` serves: `select` returns them as given (the MCP server's are
`ctxrag.kb.protocol.KnowledgeBaseProtocol`s, which it lists and reads documents of)."""


class KnowledgeTools(Generic[KB]):
    """Search and ask over open knowledge bases, by name; the chat model is made on the first ``ask``.

    `llm` is a chat model, a function that makes one (called once, on the first ``ask``), or None for
    `ctxrag.models.chat.make_chat_model` with `settings`.

    >>> tools = KnowledgeTools([kb])                                   # doctest: +SKIP
    >>> tools.search(SearchArgs(query="默认端口？", k=2)).hits[0].source  # doctest: +SKIP
    """

    def __init__(self, kbs: Sequence[KB], llm: ChatModelSource = None, *, mode: str = "hybrid",
                 k: int = 5, ask_k: int = 4, settings: Settings | None = None) -> None:
        if not kbs:
            raise ConfigError("KnowledgeTools needs at least one knowledge base, got none")
        self.kbs: dict[str, KB] = {kb.name: kb for kb in kbs}
        self.mode, self.k, self.ask_k = mode, k, ask_k
        self.settings = settings or get_settings()
        self._llm_source = llm
        self._llm: BaseChatModel | None = llm if isinstance(llm, BaseChatModel) else None
        self._llm_lock = threading.Lock()

    def select(self, kb: str | None) -> list[KB]:
        """The served knowledge base `kb`, or all of them; `ConfigError` naming a knowledge base not served."""
        if kb is None or kb == "":
            return list(self.kbs.values())
        if kb not in self.kbs:
            raise ConfigError(f"knowledge base {kb!r} is not served here (served: {sorted(self.kbs)})")
        return [self.kbs[kb]]

    @property
    def llm(self) -> BaseChatModel:
        """The chat model, made on first use (search never touches it)."""
        with self._llm_lock:
            if self._llm is None:
                if callable(self._llm_source):
                    self._llm = self._llm_source()
                else:
                    from ctxrag.models.chat import make_chat_model

                    self._llm = make_chat_model(self.settings)
            return self._llm

    @property
    def llm_loaded(self) -> bool:
        return self._llm is not None

    def search_documents(self, args: SearchArgs) -> list[Document]:
        query = check_query(args.query, self.settings.max_query_chars)
        retriever = make_multi_kb_retriever(self.select(args.kb), mode=args.mode or self.mode, k=args.k or self.k,
                                            filter=args.filter)
        return retriever.invoke(query)

    def search(self, args: SearchArgs) -> SearchResult:
        """The ranked chunks for ``args.query`` (see `SearchArgs`)."""
        docs = self.search_documents(args)
        return SearchResult(query=args.query, hits=[SearchHit.from_document(d) for d in docs])

    def ask(self, args: AskArgs) -> RagAnswer:
        """The cited answer of `ctxrag.chains.ask.build_ask_chain` to ``args.question``."""
        question = check_query(args.question, self.settings.max_query_chars, what="question")
        chain = build_ask_chain(self.select(args.kb), self.llm, k=args.k or self.ask_k, mode=args.mode or self.mode,
                                settings=self.settings)
        return RagAnswer.from_output(chain.invoke({"question": question}))


def format_hits(docs: Sequence[Document]) -> str:
    """Chunks as numbered text for a model: ``[n] title > heading (source)`` then the chunk."""
    if not docs:
        return "No matching chunks in the knowledge base."
    parts = []
    for i, d in enumerate(docs, 1):
        hit = SearchHit.from_document(d)
        where = " > ".join(p for p in (hit.title, hit.heading_path) if p and p != hit.title) or hit.title
        parts.append(f"[{i}] {where} ({hit.source.rsplit('/', 1)[-1]})\n{hit.text}")
    return "\n\n".join(parts)


def make_search_tool(kbs: Sequence[KnowledgeSource], *, mode: str = "hybrid", k: int = 5,
                     name: str = "search_knowledge_base", description: str | None = None) -> BaseTool:
    """A LangChain tool that searches `kbs`: the model sees the chunks as numbered text, the caller gets the
    `Document`s as the ``ToolMessage``'s artifact."""
    tools = KnowledgeTools(kbs, mode=mode, k=k)

    def run(query: str) -> tuple[str, list[Document]]:
        docs = tools.search_documents(SearchArgs(query=query))
        return format_hits(docs), docs

    names = ", ".join(tools.kbs)
    return StructuredTool.from_function(
        run, name=name, args_schema=SearchQuery, response_format="content_and_artifact",
        description=description or f"Search the knowledge base ({names}) for passages about a query; returns the "
                                   "best chunks with their sources. Use it for facts you do not know.")


def make_ask_tool(kbs: Sequence[KnowledgeSource], llm: ChatModelSource = None, *, mode: str = "hybrid", k: int = 4,
                  name: str = "ask_knowledge_base", description: str | None = None) -> BaseTool:
    """A LangChain tool that answers a question from `kbs` with [n] citations (the ask chain); the artifact is the
    retrieved `Document`s. The chat model (`llm`, see `KnowledgeTools`) is made on the first call."""
    tools = KnowledgeTools(kbs, llm, mode=mode, ask_k=k)

    def run(question: str) -> tuple[str, list[Document]]:
        out = tools.ask(AskArgs(question=question))
        cited = "\n".join(f"[{s.get('n')}] {str(s.get('source', '')).rsplit('/', 1)[-1]}" for s in out.sources)
        status = "" if out.supported is not False else "(not supported by the knowledge base) "
        return f"{status}{out.answer}" + (f"\n\nSources:\n{cited}" if cited else ""), out.documents

    names = ", ".join(tools.kbs)
    return StructuredTool.from_function(
        run, name=name, args_schema=AskQuestion, response_format="content_and_artifact",
        description=description or f"Answer a question from the knowledge base ({names}) with cited sources.")
