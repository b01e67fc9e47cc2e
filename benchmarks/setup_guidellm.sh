#!/usr/bin/env bash
# Install GuideLLM (the peer tool benchmarks/client_fidelity.py compares our client with) into its own
# virtual environment, benchmarks/.venv-guidellm, so its ~6 GB of dependencies (torch, transformers)
# never touch the project's .venv. gguf lets transformers read the tokenizer out of the SmolLM2 GGUF
# that scripts/install.sh installs, so nothing is fetched from a model hub.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv-guidellm/bin/python ] || "$PYTHON" -m venv .venv-guidellm
.venv-guidellm/bin/python -m pip install --disable-pip-version-check -q guidellm==0.8.1 gguf==0.19.0
.venv-guidellm/bin/guidellm --version
