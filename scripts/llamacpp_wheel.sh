#!/usr/bin/env bash
# Compiles llama-cpp-python's wheel from its source package, for this CPU, into a folder of its own
# (scripts/setup.sh runs it in the background, beside the other installs). The compile's output,
# thousands of lines, goes to LOG; where it fails, a few lines say why: the compiler's first errors
# and where the whole log is. Exits 1 then, leaving no folder behind.
#   bash scripts/llamacpp_wheel.sh SDIST WHEEL_DIR LOG CMAKE_ARGS
set -uo pipefail
sdist=$1 wheels=$2 log=$3 cmake_args=$4
python=${PYTHON:-.venv/bin/python}

started=$SECONDS
rm -rf "$wheels.partial"
# Not through pip's cache, keyed by the source package alone: it would hand this CPU's build to any other.
if CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$python" -m pip wheel --disable-pip-version-check \
     --no-cache-dir --no-deps -w "$wheels.partial" "$sdist" > "$log" 2>&1; then
  rm -rf "$wheels" && mv "$wheels.partial" "$wheels"
  echo "llama-cpp-python built in $((SECONDS - started)) s."
  exit 0
fi
rm -rf "$wheels.partial"
{
  echo "llama.cpp did not compile (after $((SECONDS - started)) s):"
  # The compiler's and CMake's own words, each once; not pip's, which only say that the build failed.
  causes=$(grep -E "error:|CMake Error|Killed signal|No space left" "$log" | grep -v -E "subprocess-exited-with-error|Failed (building|to build)" \
             | sed 's/^ *//' | awk '!seen[$0]++' | head -n 6 | cut -c1-300)
  echo "${causes:-$(tail -n 5 "$log")}" | sed 's/^/  /'
  if grep -q "Killed signal" "$log"; then echo "  (the compiler was killed: most likely the machine ran out of memory)"; fi
  echo "The whole log: $(realpath "$log")"
} >&2
exit 1
