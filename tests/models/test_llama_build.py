"""`ctxrag.models.llama_build`: the safe llama.cpp flags (the one source bootstrap.sh runs), and the check of an
installed build that `ctxrag doctor` prints, on this machine's real llama-cpp-python and on known system-info texts."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from ctxrag.models.llama_build import (
    AMX_CPU_FLAGS,
    build_features,
    check_llama_build,
    cpu_flags,
    rebuild_command,
    safe_cmake_args,
)

REPO = Path(__file__).resolve().parents[2]
SAPPHIRE_RAPIDS = frozenset("fpu sse2 avx avx2 fma f16c avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 "
                            "avx512vbmi avx_vnni amx_bf16 amx_tile amx_int8".split())
NATIVE_INFO = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
               "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
               "OPENMP = 1 | REPACK = 1 | ")
SAFE_INFO = NATIVE_INFO.replace("AMX_INT8 = 1 | ", "")


def test_cpu_flags_come_from_the_first_flags_line() -> None:
    text = "processor : 0\nflags\t\t: fpu avx2 amx_tile\nbugs : x\nflags : other\n"
    assert cpu_flags(text) == {"fpu", "avx2", "amx_tile"}
    assert cpu_flags("processor : 0\n") == frozenset()


def test_safe_flags_never_turn_on_amx_and_follow_the_cpu() -> None:
    args = safe_cmake_args(SAPPHIRE_RAPIDS, machine="x86_64")
    assert args.startswith("-DGGML_NATIVE=OFF ") and "AMX" not in args
    assert {"-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AVX512_VBMI=ON",
            "-DGGML_AVX_VNNI=ON"} <= set(args.split())
    older = safe_cmake_args(frozenset({"avx", "avx2", "fma", "f16c"}), machine="x86_64")
    assert older == "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    assert safe_cmake_args(SAPPHIRE_RAPIDS, machine="aarch64") == ""  # llama.cpp's own build off x86-64


def test_bootstrap_takes_its_flags_from_this_module() -> None:
    """scripts/bootstrap.sh runs the module as a plain script (before ctxrag is installed): same flags."""
    out = subprocess.run([sys.executable, "-I", str(REPO / "src/ctxrag/models/llama_build.py")],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == safe_cmake_args(cpu_flags())
    assert "src/ctxrag/models/llama_build.py" in (REPO / "scripts/bootstrap.sh").read_text(encoding="utf-8")


def test_build_features_parse_the_system_info() -> None:
    features = build_features(NATIVE_INFO)
    assert features["AMX_INT8"] and features["AVX2"] and "AMX_INT8" not in build_features(SAFE_INFO)


def test_an_amx_build_on_an_amx_cpu_fails_with_the_rebuild_command() -> None:
    finding = check_llama_build(SAPPHIRE_RAPIDS, ("0.3.36", NATIVE_INFO))
    assert not finding.ok and "AMX_INT8" in finding.message and "crashes" in finding.message
    assert finding.fix == rebuild_command(safe_cmake_args(SAPPHIRE_RAPIDS))
    assert finding.fix.startswith('CMAKE_ARGS="-DGGML_NATIVE=OFF') and "--force-reinstall --no-cache-dir" in finding.fix


@pytest.mark.parametrize(("flags", "info"), [(SAPPHIRE_RAPIDS, SAFE_INFO), (SAPPHIRE_RAPIDS - AMX_CPU_FLAGS, NATIVE_INFO)])
def test_safe_builds_and_cpus_without_amx_pass(flags: frozenset[str], info: str) -> None:
    finding = check_llama_build(flags, ("0.3.36", info))
    assert finding.ok and "0.3.36" in finding.message and not finding.fix


def test_missing_llama_cpp_is_reported_with_the_install_command() -> None:
    finding = check_llama_build(SAPPHIRE_RAPIDS, None)
    assert not finding.ok and "not installed" in finding.message and "pip install" in finding.fix


def test_the_installed_build_is_safe_on_this_machine() -> None:
    """The real llama-cpp-python here (built by bootstrap.sh with the safe flags) passes the check."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    finding = check_llama_build()
    assert finding.ok, f"{finding.message}\nfix: {finding.fix}"
    assert "AMX" not in finding.message or not (cpu_flags() & AMX_CPU_FLAGS)
