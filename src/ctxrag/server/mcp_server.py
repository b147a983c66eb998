"""``ctxrag mcp``: the knowledge bases as an MCP server (the official ``mcp`` SDK), over stdio or streamable HTTP.

Tools: ``search``, ``ask``, ``list_knowledge_bases``, ``list_documents``, ``get_document``, ``add_note`` and
``ingest``; each document is a resource ``ctxrag://{kb}/{doc_id}``. Tool input and output schemas are the typed
models of `ctxrag.tools` (search, ask), `ctxrag.chains.ask.RagAnswer` and `ctxrag.server.runnables` (notes), so an MCP
client sees the same shapes as the HTTP endpoint and the LangChain tools.

The rules of ``ctxrag serve`` hold here too: over HTTP the server binds 127.0.0.1 unless told otherwise and requires
``Authorization: Bearer <server.auth_token>`` when a token is set (a blank one is refused at start); absolute source
paths reach a client only as ``server.expose_paths`` allows (a stdio client is a local process). ``ingest`` reads only
paths under the ``roots`` the server was started with. The chat model is made on the first ``ask``.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.server.mcp_server import build_mcp_server
    server = build_mcp_server([KnowledgeBase.open("demo")], roots=["./docs"])
    server.run("stdio")                        # or: run_http(server, settings) for streamable HTTP

    from mcp import Client
    async with Client(server) as client:       # in-process, as tests do
        await client.call_tool("search", {"query": "默认端口？", "k": 2})
"""
from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Sequence

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field

from ctxrag import __version__
from ctxrag.chains.ask import RagAnswer
from ctxrag.errors import CtxragError
from ctxrag.kb.notes import NoteBook
from ctxrag.redact import redact
from ctxrag.server.middleware import (BearerAuthMiddleware, LocalRequestGuardMiddleware, check_auth_token,
                                      may_see_paths)
from ctxrag.server.runnables import NotesOutput, hide_paths, hide_paths_in_text
from ctxrag.settings import Settings, get_settings
from ctxrag.tools import AskArgs, ChatModelSource, KnowledgeTools, SearchArgs, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from ctxrag.kb import KnowledgeBaseProtocol

log = logging.getLogger(__name__)

RESOURCE_SCHEME = "ctxrag"
"""Documents are resources ``ctxrag://{kb}/{doc_id}``."""


class KnowledgeBaseInfo(BaseModel):
    """A served knowledge base and its size."""

    name: str
    documents: int
    chunks: int


class KnowledgeBaseList(BaseModel):
    knowledge_bases: list[KnowledgeBaseInfo]


class DocumentInfo(BaseModel):
    """A document of a knowledge base (without its text); ``uri`` reads it as a resource."""

    kb: str
    doc_id: str
    source: str
    title: str
    chunks: int
    uri: str


class DocumentList(BaseModel):
    documents: list[DocumentInfo]


class DocumentText(DocumentInfo):
    """A document with its full text."""

    text: str


class NoArgs(BaseModel):
    """A tool without arguments."""


class ListDocumentsArgs(BaseModel):
    kb: str | None = Field(None, description="Knowledge base name; default: all served.")


class GetDocumentArgs(BaseModel):
    doc_id: str = Field(..., min_length=1, description="Document id, source path or unique file name.")
    kb: str | None = Field(None, description="Knowledge base name; default: the first served one that has it.")


class AddNoteArgs(BaseModel):
    text: str = Field(..., min_length=1, max_length=20000, description="The note's text.")
    title: str = Field("", max_length=200, description="A title (default: the first line).")
    tags: list[str] = Field(default_factory=list, description="Tags.")
    kb: str | None = Field(None, description="Knowledge base name; default: the first served one.")


class IngestArgs(BaseModel):
    paths: list[str] = Field(..., min_length=1, description="Files or folders under the server's --root folders.")
    kb: str | None = Field(None, description="Knowledge base name; default: the first served one.")


class IngestedFile(BaseModel):
    path: str
    status: str
    reason: str = ""
    doc_id: str | None = None
    chunks: int = 0


class IngestResult(BaseModel):
    """What ingest did with each file (``added``, ``updated``, ``skipped`` unchanged, or ``failed`` with a reason)."""

    kb: str
    files: list[IngestedFile]


def _doc_uri(kb: str, doc_id: str) -> str:
    return f"{RESOURCE_SCHEME}://{kb}/{doc_id}"


def _signature(args_model: type[BaseModel], returns: Any) -> tuple[inspect.Signature, dict[str, Any]]:
    """A keyword-only signature with one parameter per field of `args_model` (its description and constraints kept),
    plus the request context: what the SDK builds the tool's input schema from."""
    params, hints = [], {}
    for name, f in args_model.model_fields.items():
        # a type built at run time from the model's fields: mypy cannot follow it, the MCP SDK reads it as usual
        ann = Annotated[(f.annotation, *f.metadata, Field(description=f.description))]  # type: ignore[name-defined]
        default = inspect.Parameter.empty if f.is_required() else f.get_default(call_default_factory=True)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann, default=default))
        hints[name] = ann
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    hints["ctx"], hints["return"] = Context, returns
    return inspect.Signature(params, return_annotation=returns), hints


class CtxragMCP:
    """The tools, resources and path policy of the MCP server over open knowledge bases (see the module docstring)."""

    def __init__(self, kbs: Sequence[KnowledgeBaseProtocol], llm: ChatModelSource = None, *, settings: Settings | None = None,
                 roots: Sequence[str | Path] = (), mode: str = "hybrid", k: int = 5, ask_k: int = 4) -> None:
        self.settings = settings or get_settings()
        self.tools = KnowledgeTools(kbs, llm, mode=mode, k=k, ask_k=ask_k, settings=self.settings)
        self.kbs = self.tools.kbs
        self.roots = [Path(r).expanduser().resolve() for r in roots]
        for r in self.roots:
            if not r.is_dir():
                raise CtxragError(f"ingest root {str(r)!r} is not a folder")
        self.expose = self.settings.server.expose_paths

    # -- policy -------------------------------------------------------------------------------------------------------
    def _local_paths(self, ctx: Context | None) -> bool:
        """Whether this request's client may see absolute paths: stdio clients are local processes."""
        request = getattr(getattr(ctx, "request_context", None), "request", None) if ctx is not None else None
        client = getattr(request, "client", None) if request is not None else None
        host = client.host if client is not None else ("127.0.0.1" if request is None else None)
        return may_see_paths(self.expose, host)

    def _shown(self, value: BaseModel, ctx: Context | None) -> Any:
        if self._local_paths(ctx):
            return value
        return type(value).model_validate(hide_paths(value.model_dump()))

    def _error(self, exc: BaseException, ctx: Context | None) -> ToolError:
        msg = redact(str(exc) or type(exc).__name__)
        if not self._local_paths(ctx):
            msg = hide_paths_in_text(msg)
        return ToolError(f"{type(exc).__name__}: {msg[:2000]}")

    def _kb(self, name: str | None) -> KnowledgeBaseProtocol:
        return self.tools.select(name)[0]

    # -- tools ----------------------------------------------------------------------------------------------------------
    def search(self, args: SearchArgs) -> SearchResult:
        """Search the knowledge bases: ranked chunks with source, heading path, chunk id and score (hybrid dense +
        BM25 by default; filter on chunk metadata)."""
        return self.tools.search(args)

    def ask(self, args: AskArgs) -> RagAnswer:
        """Answer a question from the knowledge bases with [n] citations; ``supported`` is False when nothing retrieved
        supports an answer. Loads the chat model on first use."""
        return self.tools.ask(args).model_copy(update={"documents": []})  # the chunks are in sources

    def list_knowledge_bases(self, args: NoArgs) -> KnowledgeBaseList:
        """The knowledge bases this server serves, with their document and chunk counts."""
        infos = []
        for kb in self.kbs.values():
            docs, chunks = kb.count()
            infos.append(KnowledgeBaseInfo(name=kb.name, documents=docs, chunks=chunks))
        return KnowledgeBaseList(knowledge_bases=infos)

    def list_documents(self, args: ListDocumentsArgs) -> DocumentList:
        """The documents of a knowledge base (or of all served ones), each with its resource URI."""
        return DocumentList(documents=[
            DocumentInfo(kb=kb.name, doc_id=d.doc_id, source=d.source, title=d.title, chunks=d.n_chunks,
                         uri=_doc_uri(kb.name, d.doc_id))
            for kb in self.tools.select(args.kb) for d in kb.list_documents()])

    def get_document(self, args: GetDocumentArgs) -> DocumentText:
        """A document's full text, by id, source path or unique file name."""
        kbs = self.tools.select(args.kb)
        for i, kb in enumerate(kbs):
            try:
                d = kb.get_document(args.doc_id)
            except CtxragError:
                if i == len(kbs) - 1:
                    raise
                continue
            return DocumentText(kb=kb.name, doc_id=d.doc_id, source=d.source, title=d.title, chunks=d.n_chunks,
                                uri=_doc_uri(kb.name, d.doc_id), text=d.text)
        raise AssertionError("unreachable: select() returns at least one knowledge base")

    def add_note(self, args: AddNoteArgs) -> NotesOutput:
        """Save a note into a knowledge base (searchable at once, as ``note://ID``)."""
        kb = self._kb(args.kb)
        book = NoteBook(kb)
        try:
            note = book.create(args.text, title=args.title or None, tags=args.tags)
        finally:
            book.close()
        return NotesOutput(action="add", notes=[note.to_dict()])

    def ingest(self, args: IngestArgs) -> IngestResult:
        """Ingest files or folders into a knowledge base; only paths under the folders the server was started with
        (``--root``) are read, any other is refused."""
        paths = [self.allowed_path(p) for p in args.paths]
        kb = self._kb(args.kb)
        report = kb.ingest(paths, progress=False)
        return IngestResult(kb=kb.name, files=[IngestedFile(path=f.path, status=f.status, reason=f.reason,
                                                             doc_id=f.doc_id, chunks=f.chunks) for f in report.files])

    def allowed_path(self, path: str) -> Path:
        """`path` resolved, or `CtxragError` naming it when it is not under one of the roots."""
        resolved = Path(path).expanduser().resolve()
        if not self.roots:
            raise CtxragError(f"ingest of {path!r} refused: the server was started without ingest roots (--root)")
        if not any(resolved == r or resolved.is_relative_to(r) for r in self.roots):
            raise CtxragError(f"ingest of {path!r} refused: not under the server's roots "
                              f"({', '.join(str(r) for r in self.roots)})")
        return resolved

    def read_document(self, kb: str, doc_id: str) -> str:
        return self._kb(kb).get_document(doc_id).text

    # -- wiring --------------------------------------------------------------------------------------------------------
    def register(self, server: MCPServer) -> MCPServer:
        """Adds the tools and the document resource template to `server`."""
        for method, args_model, returns in (
                (self.search, SearchArgs, SearchResult), (self.ask, AskArgs, RagAnswer),
                (self.list_knowledge_bases, NoArgs, KnowledgeBaseList),
                (self.list_documents, ListDocumentsArgs, DocumentList),
                (self.get_document, GetDocumentArgs, DocumentText),
                (self.add_note, AddNoteArgs, NotesOutput), (self.ingest, IngestArgs, IngestResult)):
            server.add_tool(self._tool_function(method, args_model, returns), name=method.__name__,
                            description=inspect.getdoc(method))

        def document(kb: str, doc_id: str) -> str:
            try:
                return self.read_document(kb, doc_id)
            except CtxragError as e:
                raise ResourceError(redact(str(e))) from e

        server.resource(f"{RESOURCE_SCHEME}://{{kb}}/{{doc_id}}", name="document", mime_type="text/plain",
                        description="A document's full text")(document)
        return server

    def _tool_function(self, method: Callable[[Any], BaseModel], args_model: type[BaseModel],
                       returns: type[BaseModel]) -> Callable[..., Any]:
        """A function whose signature is `args_model`'s fields, calling `method` with the validated model."""

        def call(*, ctx: Context, **kwargs: Any) -> Any:
            try:
                return self._shown(method(args_model(**kwargs)), ctx)
            except (CtxragError, ValueError, OSError) as e:
                raise self._error(e, ctx) from e
            except Exception as e:  # a model endpoint's own errors (refused, down) say why
                from ctxrag.models.chat import as_model_error

                model_error = as_model_error(e, None)
                if model_error is None:
                    raise
                raise self._error(model_error, ctx) from e

        call.__signature__, call.__annotations__ = _signature(args_model, returns)  # type: ignore[attr-defined]
        call.__name__ = method.__name__
        return call


def build_mcp_server(kbs: Sequence[KnowledgeBaseProtocol], llm: ChatModelSource = None, *, settings: Settings | None = None,
                     roots: Sequence[str | Path] = (), mode: str = "hybrid", k: int = 5, ask_k: int = 4) -> MCPServer:
    """An `MCPServer` over the open knowledge bases `kbs` (see the module docstring); `llm` as in
    `ctxrag.tools.KnowledgeTools` (made on the first ``ask``)."""
    handler = CtxragMCP(kbs, llm, settings=settings, roots=roots, mode=mode, k=k, ask_k=ask_k)
    names = ", ".join(handler.kbs)
    server = MCPServer("ctxrag", version=__version__, log_level="WARNING",
                       instructions=f"Search and ask the knowledge bases {names}: use `search` for passages with "
                                    "their sources, `ask` for a cited answer.")
    return handler.register(server)


def http_app(server: MCPServer, settings: Settings | None = None) -> Any:
    """The streamable HTTP ASGI app (``/mcp``) behind ``ctxrag serve``'s bearer token and cross-site guard."""
    s = settings or get_settings()
    token = check_auth_token(s.server)
    app: Any = server.streamable_http_app(host=s.server.host)
    app = LocalRequestGuardMiddleware(app, check_origin=token is None, allowed_hosts=[s.server.host,
                                                                                        *s.server.allowed_hosts])
    if token is not None:
        app = BearerAuthMiddleware(app, token=s.server.auth_token, public_paths=())  # type: ignore[arg-type]
    return app


def run_http(server: MCPServer, settings: Settings | None = None) -> None:
    """Serve `server` over streamable HTTP on ``settings.server.host:port`` (``/mcp``) until stopped."""
    import uvicorn

    s = settings or get_settings()
    uvicorn.run(http_app(server, s), host=s.server.host, port=s.server.port, log_level="warning")
