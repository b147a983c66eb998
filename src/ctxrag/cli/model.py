"""`ctxrag model`: the warm local chat model process that `ask`, `demo` and `chat` keep loaded between commands.

    ctxrag model status      # the running model processes of this home
    ctxrag model stop        # stop them now (they also exit by themselves after llm.warm_idle_s idle seconds)
"""
from __future__ import annotations

import typer

from ctxrag.cli.common import guard

model_app = typer.Typer(help="The warm local chat model process (kept loaded between ask/demo/chat commands).",
                        no_args_is_help=True)


@model_app.command("status")
def status() -> None:
    """List this home's running warm model processes."""
    from ctxrag.models.warm import warm_processes
    from ctxrag.settings import get_settings

    def body() -> None:
        running = warm_processes()
        idle = get_settings().llm.warm_idle_s
        if not running:
            typer.echo(f"no warm model process (each exits after {idle:g} idle seconds; CTXRAG_LLM__WARM_IDLE_S)")
        for p in running:
            typer.echo(f"pid {p['pid']}  {p['model_path']}  n_ctx={p['n_ctx']}  {p['url']}")

    guard(body)


@model_app.command("stop")
def stop() -> None:
    """Stop this home's warm model processes now."""
    from ctxrag.models.warm import stop_warm_models

    def body() -> None:
        pids = stop_warm_models()
        typer.echo(f"stopped {len(pids)} warm model process(es)" + (f": {', '.join(map(str, pids))}" if pids else ""))

    guard(body)
