#!/usr/bin/env bash
# Runs the tests offline on the real embedded model. Run scripts/setup.sh --test first.
#   bash scripts/test.sh            the whole suite, as CI runs it: the tests marked video in .venv-video
#                                   (they need torchvision), beside everything else in .venv
#   bash scripts/test.sh --quick    the fast loop while working: no browser, no vLLM, no app served,
#                                   nothing slow (tests/needs.py); a few minutes; the whole suite still has to pass
#   bash scripts/test.sh ARGS...    pytest ARGS in .venv
# Here a skipped test fails the run unless it needs hardware this machine lacks (tests/strict_run.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 GRADIO_ANALYTICS_ENABLED=False ANYCHAT_STRICT_SKIPS=1
# torch's OpenMP threads otherwise busy-wait and starve every other process on a small machine.
export OMP_WAIT_POLICY=PASSIVE

if [ "${1:-}" = --quick ]; then
  shift
  exec .venv/bin/python -m pytest -n 2 -m "not browser and not vllm and not server and not slow" "$@"
fi
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi

if [ ! -x .venv-video/bin/python ]; then
  echo "No .venv-video, so the video tests cannot run: bash scripts/setup.sh --test makes it." >&2
  exit 1
fi
status=0
started=$SECONDS
mapfile -t video_modules < <(grep -l "pytest.mark.video" tests/test_*.py)
# The video tests run beside the rest: they keep one core busy about half the time, which the
# rest's two workers fill. Their output comes after the rest's.
video_log=$(mktemp)
trap 'rm -f "$video_log"; kill $(jobs -p) 2>/dev/null || true' EXIT
# .venv-video has no bytecode until a module is imported (scripts/setup_video_env.sh): it is written
# then, where PYTHONDONTWRITEBYTECODE would have every process compile what it imports again.
(
  env -u PYTHONDONTWRITEBYTECODE .venv-video/bin/python -m pytest -m video --cpu-report 10 "${video_modules[@]}"
  echo "test.sh: the video tests took $((SECONDS - started)) s"
) > "$video_log" 2>&1 &
video=$!
# Two workers (tests/workers.py shares the modules between them): most tests wait on a model,
# a server or a browser part of the time. The CPU report says where the suite's time goes on a
# machine it keeps busy (tests/cpu_report.py), which --durations cannot.
.venv/bin/python -m pytest -n 2 --cpu-report 25 || status=$?
echo "test.sh: the rest took $((SECONDS - started)) s"
wait "$video" || status=$?
echo "test.sh: the video tests, in .venv-video:"
cat "$video_log"
echo "test.sh: all took $((SECONDS - started)) s"
exit "$status"
