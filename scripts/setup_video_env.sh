#!/usr/bin/env bash
# A second environment, .venv-video, in which the video tests run for real.
#
# transformers' video processors need torchvision, and no torchvision build works beside the CPU
# torch of .venv. torch 2.14.1 with torchvision 0.29.1 (CUDA builds, about 5.5 GB, that run on
# the CPU) do. Everything else is requirements.txt as in .venv. Safe to run again.
#   bash scripts/setup_video_env.sh
#   .venv-video/bin/python -m pytest -m video
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv-video}
PYTHON=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

"${pip[@]}" torch==2.14.1 torchvision==0.29.1
# requirements.txt pins .venv's CPU torch; here torch stays the one installed above.
grep -v '^torch==' requirements.txt | "${pip[@]}" -r /dev/stdin pytest pytest-asyncio
echo "setup done: $VENV"
