"""The llama.cpp build: safe ``CMAKE_ARGS`` for this CPU, and a check of the installed llama-cpp-python build.

llama-cpp-python compiles llama.cpp at install time. Its default ``-march=native`` build turns on the AMX kernels on
Xeons that have AMX, and that build crashes in the first decode there (segmentation fault, seen on this project's
Sapphire Rapids machines with llama-cpp-python 0.3.x). So on x86-64 we choose the instruction sets ourselves:
AVX2/FMA/F16C everywhere, the AVX-512 family when the CPU has it, never AMX. This module is the one source of those
flags: ``scripts/bootstrap.sh`` runs it as a script (standard library only, so it works before ctxrag is installed),
and ``ctxrag doctor`` uses it to judge the installed build and print the command that rebuilds it.

Example::

    python src/ctxrag/models/llama_build.py            # prints the CMAKE_ARGS for this machine (empty: keep native)

    from ctxrag.models.llama_build import check_llama_build
    finding = check_llama_build()
    print(finding.ok, finding.message)
"""
from __future__ import annotations

import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

LLAMA_SPEC = "llama-cpp-python>=0.3.16,<0.4"
"""The llama-cpp-python versions ctxrag supports (the ``local`` extra pins the same range)."""
AMX_CPU_FLAGS = frozenset({"amx_tile", "amx_int8", "amx_bf16"})
"""/proc/cpuinfo flags of Intel AMX."""


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU feature flags (``/proc/cpuinfo``'s first ``flags`` line); empty where there is no such file."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def safe_cmake_args(flags: frozenset[str] | set[str], machine: str | None = None) -> str:
    """``CMAKE_ARGS`` that build llama.cpp for this CPU without AMX; "" (llama.cpp's own native build) off x86-64."""
    if (machine or platform.machine()).lower() not in {"x86_64", "amd64"}:
        return ""
    args = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON"]
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        args.append("-DGGML_AVX512=ON")
        for flag, option in (("avx512_vnni", "AVX512_VNNI"), ("avx512_bf16", "AVX512_BF16"), ("avx512vbmi", "AVX512_VBMI")):
            if flag in flags:
                args.append(f"-DGGML_{option}=ON")
    if "avx_vnni" in flags:
        args.append("-DGGML_AVX_VNNI=ON")
    return " ".join(args)


def rebuild_command(cmake_args: str) -> str:
    """The shell command that replaces the installed llama-cpp-python with a build from these flags."""
    env = f'CMAKE_ARGS="{cmake_args}" ' if cmake_args else ""
    return f"{env}pip install --force-reinstall --no-cache-dir --no-binary llama-cpp-python '{LLAMA_SPEC}'"


def build_features(system_info: str) -> dict[str, bool]:
    """``{"AVX2": True, "AMX_INT8": False, ...}`` from llama.cpp's ``llama_print_system_info()`` text
    (``"CPU : SSE3 = 1 | AVX2 = 1 | ... |"``)."""
    return {name: value == "1" for name, value in re.findall(r"([A-Z][A-Z0-9_]*) = (\d)", system_info)}


@dataclass(frozen=True)
class BuildFinding:
    """What `check_llama_build` found: ``ok`` False means the installed build will crash or is missing."""

    ok: bool
    message: str
    """One line saying what was found."""
    fix: str = ""
    """The command that fixes it (empty when ``ok``)."""


def installed_system_info() -> tuple[str, str] | None:
    """``(version, system info)`` of the installed llama-cpp-python, or None when it is not installed."""
    try:
        import llama_cpp
    except ImportError:
        return None
    info = llama_cpp.llama_print_system_info()
    text = info.decode("utf-8", errors="replace") if isinstance(info, bytes) else str(info)
    return str(getattr(llama_cpp, "__version__", "?")), text


def check_llama_build(
    flags: frozenset[str] | None = None, installed: tuple[str, str] | None | bool = True
) -> BuildFinding:
    """Judge the installed llama.cpp build on this CPU: a build with AMX kernels on an AMX CPU is the known crash.

    `flags` and `installed` (``(version, system info)``, None for not installed) default to this machine's; tests
    pass their own."""
    flags = cpu_flags() if flags is None else flags
    found = installed_system_info() if installed is True else installed
    safe = safe_cmake_args(flags)
    if not found:
        return BuildFinding(False, "llama-cpp-python is not installed (needed by the local chat model)",
                            rebuild_command(safe))
    version, info = found
    features = build_features(info)
    amx_build = sorted(name for name, on in features.items() if on and name.startswith("AMX"))
    on = " ".join(sorted(name for name, v in features.items() if v)) or "(no CPU features reported)"
    if amx_build and flags & AMX_CPU_FLAGS:
        return BuildFinding(
            False,
            f"llama-cpp-python {version} was built with {', '.join(amx_build)} and this CPU has AMX: that build crashes "
            "in the first decode; rebuild it without AMX",
            rebuild_command(safe),
        )
    return BuildFinding(True, f"llama-cpp-python {version}, built with: {on}")


if __name__ == "__main__":  # scripts/bootstrap.sh: print the CMAKE_ARGS for this machine
    sys.stdout.write(safe_cmake_args(cpu_flags()) + "\n")
