"""The HTTP endpoint: LangServe routes over ctxrag's runnables, plus auth, body limits, health and JSON errors.

Routes (each with ``/invoke``, ``/batch``, ``/stream``, ``/stream_log`` and a ``/playground/`` page):
``/ask`` (RAG over the knowledge bases), ``/chat`` (the routing assistant over the first one), ``/search`` (the
retriever), ``/notes`` (add / search / list notes of the first one); ``GET /health`` needs no token.

Fails closed: an empty ``server.auth_token`` is refused at start (`ConfigError`). Without a token, POSTs must be
JSON from a local origin (see `LocalRequestGuardMiddleware`). A model that is down or refuses gives 503 on every
LLM route; a batch over ``server.max_batch_inputs`` gives 413; a query over ``max_query_chars`` gives 400.
Absolute source paths go only to local clients unless ``server.expose_paths`` says otherwise.

LangServe is archived upstream (pinned to 0.3.3): this module is the only place that imports it; the runnables
live in `ctxrag.server.runnables` and work without it.

Example::

    import uvicorn
    from ctxrag.server.app import create_app
    uvicorn.run(create_app(kb_names=["demo"]), host="127.0.0.1", port=8000)

    from langserve import RemoteRunnable
    RemoteRunnable("http://127.0.0.1:8000/ask/").invoke({"question": "默认端口是多少？"})["answer"]
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from langserve import add_routes
from starlette.exceptions import HTTPException as StarletteHTTPException

from ctxrag.enums import SearchMode
from ctxrag.errors import (ConfigError, CtxragError, DocumentNotFound, KnowledgeBaseLocked, KnowledgeBaseNotFound,
                           ModelError)
from ctxrag import __version__
from ctxrag.kb import open_kb
from ctxrag.models import chat
from ctxrag.models.chat import as_model_error, describe_endpoint, model_failure_types
from ctxrag.redact import install_log_redaction, redact, redact_value, remember_settings
from ctxrag.retrievers.modes import DEFAULT_MODE
from ctxrag.server import runnables
from ctxrag.server.middleware import (
    BatchSizeLimitMiddleware,
    BearerAuthMiddleware,
    BodySizeLimitMiddleware,
    CloseConnectionMiddleware,
    EventStreamRewriteMiddleware,
    LocalRequestGuardMiddleware,
    StreamErrorGuardMiddleware,
    check_auth_token,
    may_see_paths,
)
from ctxrag.server.runnables import EXPOSE_PATHS_KEY, hide_paths_in_text
from ctxrag.settings import Settings, get_settings

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel

    from ctxrag.kb import KnowledgeBaseProtocol

log = logging.getLogger(__name__)


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, (KnowledgeBaseNotFound, DocumentNotFound)):
        return 404
    if isinstance(exc, KnowledgeBaseLocked):
        return 503  # another process holds the write lock past the timeout: retry later
    if isinstance(exc, ModelError):
        return 503  # the model is down or missing: not the client's fault, but not a crash either
    if isinstance(exc, (ConfigError, ValueError, CtxragError)):
        return 400
    return 500


def _install_error_handlers(app: FastAPI) -> None:
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for e in exc.errors():
            if isinstance(e, dict):  # drop echoed input and pydantic's context objects; keep where and what
                errors.append({k: e[k] for k in ("loc", "msg", "type") if k in e})
            else:
                errors.append({"msg": str(e)})
        return JSONResponse({"detail": errors}, status_code=422)

    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    async def known_error(request: Request, exc: Exception) -> JSONResponse:
        model_error = as_model_error(exc, getattr(request.app.state, "llm", None))
        if model_error is not None:  # a dead or refusing endpoint raises the client's own errors: 503, not 500
            log.warning("%s %s: %s", request.method, request.url.path, model_error)
            exc = model_error
        status = _status_of(exc)
        if status == 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
            return JSONResponse({"detail": "internal server error"}, status_code=500)
        msg = str(exc) or type(exc).__name__
        msg = redact(msg)  # an endpoint's 401 may echo the key; a URL may carry user:password@
        client = request.client.host if request.client else None
        if not may_see_paths(getattr(request.app.state, "expose_paths", "never"), client):
            msg = hide_paths_in_text(msg)  # e.g. IndexCorruptError names a file under the knowledge base folder
        return JSONResponse({"detail": msg[:2000], "error": type(exc).__name__}, status_code=status)

    app.add_exception_handler(RequestValidationError, validation)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    # model failures get their own entry: Starlette re-raises what only the catch-all `Exception` handler takes,
    # which closes the client's keep-alive connection after the 503
    handled: tuple[type[Exception], ...] = (CtxragError, ValueError, *model_failure_types(), Exception)
    for exc_type in handled:
        app.add_exception_handler(exc_type, known_error)


def _path_policy(expose: str) -> Any:
    """LangServe's per-request config hook: tell the runnables whether this client may see absolute paths."""

    def modify(config: dict[str, Any], request: Request) -> dict[str, Any]:
        allowed = may_see_paths(expose, request.client.host if request.client else None)
        # in both places: LangServe's /batch keeps only `configurable`; the server's value overrides the client's
        return {**config, "metadata": {**(config.get("metadata") or {}), EXPOSE_PATHS_KEY: allowed},
                "configurable": {**(config.get("configurable") or {}), EXPOSE_PATHS_KEY: allowed}}

    return modify


def create_app(
    settings: Settings | None = None,
    *,
    kb_names: Sequence[str] | None = None,
    llm: BaseChatModel | None = None,
    kbs: Sequence[KnowledgeBaseProtocol] | None = None,
    mode: SearchMode | str = DEFAULT_MODE,
    k: int = 4,
) -> FastAPI:
    """The FastAPI app (see the module docstring).

    `mode` (`ctxrag.retrievers.modes`) is checked here, before any route is built. `kb_names` (default:
    ``settings.default_kb``) must exist; `kbs` passes opened knowledge bases (`KnowledgeBaseProtocol`) instead.
    `llm` defaults to `make_chat_model(settings)`; when no chat model can be made, ``/ask`` and ``/chat`` are left
    out and ``/health`` says why. Auth and the body limit come from ``settings.server``.
    """
    mode = SearchMode.from_str(mode)
    s = settings or get_settings()
    remember_settings(s)  # every log line, error detail, health field and event stream is redacted
    install_log_redaction()
    token = check_auth_token(s.server)
    if kbs is None:
        names = list(kb_names or [s.default_kb])
        if not names:
            raise ConfigError("create_app: no knowledge base given")
        kbs = [open_kb(n, s, create=False) for n in names]
    kbs = list(kbs)
    if not kbs:
        raise ConfigError("create_app: no knowledge base given")
    llm_note = "injected"
    if llm is None:
        try:
            llm = chat.make_chat_model(s)  # looked up per call, so tests can stand in a model
            llm_note = describe_endpoint(llm)
        except CtxragError as e:
            llm_note = redact(f"unavailable: {e}")
            log.warning("no chat model (%s): serving /search and /notes only", e)

    app = FastAPI(title="ctxrag", version=_version(),
                  description="Contextual RAG over Chinese and English knowledge bases (LangServe routes).")
    _install_error_handlers(app)
    routes: dict[str, str] = {}
    limit = s.max_query_chars
    policy = _path_policy(s.server.expose_paths)
    add_routes(app, runnables.search_runnable(kbs, mode=mode, k=max(k, 5), max_query_chars=limit), path="/search",
               per_req_config_modifier=policy)
    routes["/search"] = "retriever: query string -> ranked chunks"
    if llm is not None:
        add_routes(app, runnables.ask_runnable(kbs, llm, mode=mode, k=k, max_query_chars=limit, gate=s.answer_gate,
                                                 evidence=s.answer_evidence,
                                                 on_instruction=s.answer_on_instruction),
                   path="/ask",
                   per_req_config_modifier=policy)
        routes["/ask"] = "RAG answer with [n] citations"
        try:
            add_routes(app, runnables.chat_runnable(kbs[0], llm, k=k, max_query_chars=limit,
                                                    evidence=s.answer_evidence,
                                                    on_instruction=s.answer_on_instruction), path="/chat",
                       per_req_config_modifier=policy)
            routes["/chat"] = f"routing assistant over {kbs[0].name!r}"
        except ImportError as e:  # the assistant is optional
            log.warning("no /chat route: %s", e)
    try:
        add_routes(app, runnables.notes_runnable(kbs[0], max_query_chars=limit), path="/notes",
                   per_req_config_modifier=policy)
        routes["/notes"] = f"add / search / list notes of {kbs[0].name!r}"
    except ImportError as e:
        log.warning("no /notes route: %s", e)

    health = {"status": "ok", "version": _version(), "knowledge_bases": [kb.name for kb in kbs],
              "llm": redact(llm_note), "routes": routes, "auth": token is not None}

    @app.get("/health", tags=["meta"])
    @app.get("/health/", include_in_schema=False)  # answered here: a redirect would send the client to /health first
    def health_route() -> dict[str, Any]:
        return health

    @app.get("/", tags=["meta"])
    def index() -> dict[str, Any]:
        return {"routes": {p: {"about": about, "playground": f"{p}/playground/"} for p, about in routes.items()},
                "docs": "/docs"}

    app.state.knowledge_bases = kbs
    app.state.expose_paths = s.server.expose_paths
    app.state.llm = llm
    # the last added runs first: auth refuses before a large body is read; then the cross-site guard; then the size
    # limit; then the batch cap (on the bounded body); then the stream guard
    expose = s.server.expose_paths
    if expose != "always":  # intermediate steps (stream_log, stream_events) carry paths the final output hides
        app.add_middleware(EventStreamRewriteMiddleware, rewrite=hide_paths_in_text,
                           applies_to=lambda host: not may_see_paths(expose, host))
    # every client: an error event in the stream carries the exception's text (a 401 that echoes the key)
    app.add_middleware(EventStreamRewriteMiddleware, rewrite=redact_value, applies_to=lambda host: True)
    app.add_middleware(StreamErrorGuardMiddleware)
    app.add_middleware(BatchSizeLimitMiddleware, max_inputs=s.server.max_batch_inputs)
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=s.server.max_body_bytes)
    app.add_middleware(LocalRequestGuardMiddleware, check_origin=token is None,
                       allowed_hosts=[s.server.host, *s.server.allowed_hosts])
    secret = s.server.auth_token  # passed as the SecretStr, so the token never shows in a repr of the middleware
    if token is not None and secret is not None:  # check_auth_token returns the secret's value or None
        app.add_middleware(BearerAuthMiddleware, token=secret, public_paths=("/health",))
    app.add_middleware(CloseConnectionMiddleware)  # outermost: every response, refusals included
    return app


def _version() -> str:
    return __version__
