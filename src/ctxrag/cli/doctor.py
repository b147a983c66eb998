"""`ctxrag doctor`: is this installation ready for the embedded offline default? Says what is wrong and how to fix it.

    ctxrag doctor            # one line per check; exit 1 when one fails
    ctxrag doctor --json
    ctxrag doctor --llama-cmake-args      # only the safe CMAKE_ARGS for building llama.cpp on this CPU

Checks the data folders, the embedded models (data wheels installed, assembled into the shared models cache) and the
installed llama.cpp build (a build with AMX kernels crashes on AMX CPUs; see `ctxrag.models.llama_build`).
"""
from __future__ import annotations

import json
import sys
from typing import Any

import typer

from ctxrag.settings import get_settings


def _check(name: str, ok: bool | None, message: str, fix: str = "") -> dict[str, Any]:
    """One finding: ``ok`` True (fine), False (broken) or None (a note: optional part absent)."""
    return {"check": name, "status": {True: "ok", False: "FAIL", None: "note"}[ok], "message": message, "fix": fix}


def run_checks() -> list[dict[str, Any]]:
    """Every finding, in the order printed."""
    from ctxrag import __version__
    from ctxrag.errors import ModelFileError
    from ctxrag.models.gguf import LOCAL_MODELS, locate_model_parts
    from ctxrag.models.llama_build import check_llama_build

    s = get_settings()
    local = s.llm.provider == "local"
    out = [_check("ctxrag", True, f"ctxrag {__version__} on Python {sys.version.split()[0]} ({sys.executable})"),
           _check("home", True, f"knowledge bases in {s.kb_root} (CTXRAG_HOME)"),
           _check("models cache", True, f"assembled models in {s.models_dir}, shared by every CTXRAG_HOME "
                                        "(CTXRAG_MODELS_CACHE)")]
    for key, spec in LOCAL_MODELS.items():
        chosen = local and s.llm.model_path is None and s.llm.local_model == key
        extra = "local" if key == "1.5b" else "local-small"
        try:
            locate_model_parts(spec)
        except ModelFileError as exc:
            out.append(_check(f"model {key}", False if chosen else None,
                              f"{spec.name}: {exc}" if chosen else f"{spec.name}: not installed (optional)",
                              f"pip install 'ctxrag[{extra}]'"))
            continue
        assembled = (s.models_dir / spec.filename).is_file()
        where = f"assembled at {s.models_dir / spec.filename}" if assembled else "assembled on first use"
        out.append(_check(f"model {key}", True, f"{spec.name}: installed, {where}{' (selected)' if chosen else ''}"))
    if s.llm.model_path is not None:
        present = s.llm.model_path.expanduser().is_file()
        out.append(_check("model path", present if local else None, f"llm.model_path={s.llm.model_path}"
                          + ("" if present else ": no such file"), "" if present else "set CTXRAG_LLM__MODEL_PATH"))
    build = check_llama_build()
    out.append(_check("llama.cpp", build.ok if (local or build.ok) else None,
                      build.message if local or build.ok else f"{build.message}; only the local provider needs it",
                      build.fix))
    return out


def doctor(json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
           llama_cmake_args: bool = typer.Option(
               False, "--llama-cmake-args",
               help="Only print the CMAKE_ARGS that build llama.cpp safely on this CPU (no AMX), for "
                    "CMAKE_ARGS=\"$(ctxrag doctor --llama-cmake-args)\" pip install 'ctxrag[local]'.")) -> None:
    """Check the installation (models, llama.cpp build) and say how to fix what is wrong."""
    if llama_cmake_args:
        from ctxrag.models.llama_build import cpu_flags, safe_cmake_args

        typer.echo(safe_cmake_args(cpu_flags()))
        return
    findings = run_checks()
    if json_out:
        typer.echo(json.dumps(findings, ensure_ascii=False, indent=1))
    else:
        for f in findings:
            typer.echo(f"{f['status']:4s}  {f['check']}: {f['message']}")
            if f["fix"] and f["status"] != "ok":
                typer.echo(f"      fix: {f['fix']}")
    if any(f["status"] == "FAIL" for f in findings):
        raise typer.Exit(1)
