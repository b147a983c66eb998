"""`ctxrag serve`: the HTTP endpoint (LangServe routes /ask, /chat, /search, /notes with playgrounds; /health).

    ctxrag serve --kb demo                        # http://127.0.0.1:8000/ask/playground/
    CTXRAG_SERVER__AUTH_TOKEN=s3cret ctxrag serve --kb demo --kb general --port 8080
"""
from __future__ import annotations

from typing import Optional

import typer

from ctxrag.cli.common import mode_option
from ctxrag.enums import SearchMode
from ctxrag.errors import CtxragError


def serve(
    host: Optional[str] = typer.Option(None, "--host", help="Address to bind (default: server.host, 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, "--port", min=1, max=65535, help="Port (default: server.port, 8000)."),
    kb: Optional[list[str]] = typer.Option(None, "--kb", help="Knowledge base(s) to serve; repeat for several."),
    mode: SearchMode = mode_option(),
    k: int = typer.Option(4, "-k", "--k", min=1, help="Chunks given to the model per answer."),
) -> None:
    """Serve ask / chat / search / notes over HTTP (token auth when server.auth_token is set)."""
    from ctxrag.settings import get_settings

    try:
        import uvicorn

        from ctxrag.server.app import create_app
    except ImportError as e:
        typer.echo(f"error: the server needs its extra: pip install 'ctxrag[server]' ({e})", err=True)
        raise typer.Exit(1)
    s = get_settings()
    bind_host, bind_port = host or s.server.host, port or s.server.port
    # the bound host is one the cross-site guard accepts in Host/Origin
    s = s.model_copy(update={"server": s.server.model_copy(update={"host": bind_host, "port": bind_port})})
    try:
        app = create_app(s, kb_names=kb or [s.default_kb], mode=mode, k=k)
    except CtxragError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1)
    auth = s.server.auth_token is not None  # create_app refused a blank one
    typer.echo(f"ctxrag: serving {', '.join(kb_.name for kb_ in app.state.knowledge_bases)}"
               f" on http://{bind_host}:{bind_port} (playgrounds: /ask/playground/ /search/playground/ ...;"
               f" auth {'on' if auth else 'off: POSTs only as JSON from local pages'};"
               f" source paths: {s.server.expose_paths})", err=True)
    uvicorn.run(app, host=bind_host, port=bind_port, log_level="info")
