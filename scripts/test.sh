#!/usr/bin/env bash
# Runs the whole test suite offline on the real embedded model. Run scripts/setup.sh --test first.
# The tests that need torchvision (marked video) run in .venv-video; everything else in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 GRADIO_ANALYTICS_ENABLED=False
# torch's OpenMP threads otherwise busy-wait and starve every other process on a small machine.
export OMP_WAIT_POLICY=PASSIVE
if [ "$#" = 0 ] && [ -x .venv-video/bin/python ]; then
  .venv-video/bin/python -m pytest -m video tests/test_multimodal.py tests/test_vllm_multimodal.py tests/test_page_bad_input.py tests/test_security_media.py
fi
exec .venv/bin/python -m pytest "$@"
