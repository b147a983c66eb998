"""`ctxrag mcp`: the knowledge bases as an MCP server for agents, desktop assistants and IDEs (stdio by default).

    ctxrag mcp --kb demo                                        # stdio: a client starts this as its subprocess
    ctxrag mcp --kb demo --root ~/notes                         # `ingest` may read files under ~/notes
    CTXRAG_SERVER__AUTH_TOKEN=s3cret ctxrag mcp --kb demo --transport http --port 8765   # http://127.0.0.1:8765/mcp
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ctxrag.cli.common import guard, kb_names, open_kbs


def mcp(
    kb: Optional[list[str]] = typer.Option(None, "--kb", help="Knowledge base(s) to serve; repeat for several."),
    transport: str = typer.Option("stdio", "--transport", help="stdio | http (streamable HTTP at /mcp)."),
    host: Optional[str] = typer.Option(None, "--host", help="HTTP address to bind (default: server.host, 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, "--port", min=1, max=65535, help="HTTP port (default: server.port)."),
    root: Optional[list[Path]] = typer.Option(None, "--root", help="Folder the `ingest` tool may read; repeat for "
                                                                   "several (none: ingest is refused)."),
    mode: str = typer.Option("hybrid", "--mode", help="dense | bm25 | hybrid | graph"),
    k: int = typer.Option(5, "-k", "--k", min=1, help="Chunks per search (the tool's default)."),
) -> None:
    """Serve search / ask / documents / notes / ingest as MCP tools (token auth over HTTP when server.auth_token is
    set; the chat model loads on the first ask)."""
    if transport not in ("stdio", "http"):
        typer.echo(f"error: --transport {transport!r}: expected stdio or http", err=True)
        raise typer.Exit(2)
    try:
        from ctxrag.server.mcp_server import build_mcp_server, run_http
    except ImportError as e:
        typer.echo(f"error: the MCP server needs its extra: pip install 'ctxrag[mcp]' ({e})", err=True)
        raise typer.Exit(1)
    from ctxrag.settings import get_settings

    s = get_settings()
    s = s.model_copy(update={"server": s.server.model_copy(update={"host": host or s.server.host,
                                                                   "port": port or s.server.port})})
    server = guard(lambda: build_mcp_server(open_kbs(kb_names(kb)), settings=s, roots=root or [], mode=mode, k=k))
    if transport == "stdio":
        server.run("stdio")
        return
    auth = s.server.auth_token is not None
    typer.echo(f"ctxrag: MCP on http://{s.server.host}:{s.server.port}/mcp (auth {'on' if auth else 'off'}; "
               f"source paths: {s.server.expose_paths})", err=True)
    guard(lambda: run_http(server, s))
