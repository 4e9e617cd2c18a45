#!/usr/bin/env bash
# Compiles a venv's Python files to bytecode on every core, for packages installed without it
# (scripts/uv_pip.sh: uv writes none, where pip compiles on one core as it installs); run again
# after more installs, it compiles only what is new. Without the bytecode, every process compiles
# what it imports each time it starts where PYTHONDONTWRITEBYTECODE is set.
#   bash scripts/compile_venv.sh .venv
set -euo pipefail
venv=$1
packages=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# A few packages ship files that are not Python 3 (templates, test data): pip skips them silently too.
"$venv/bin/python" -m compileall -q -j 0 "$packages" > /dev/null || true
echo "compiled: $packages"
