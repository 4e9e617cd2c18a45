"""Every benchmark in bench/ runs here at a tiny count, so that none can rot unseen: it must exit
cleanly and print its table with at least one row, and no figure of it may say FAILED. No timing is
asserted (timings belong to full runs, side by side)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.markdown_table import table_rows

ROOT = Path(__file__).resolve().parent.parent
HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_LLAMACPP = importlib.util.find_spec("llama_cpp") is not None

# Each benchmark with the arguments of its smoke run, and the first column of each of its tables.
SMOKE_RUNS = [
    pytest.param("engine_overhead.py", ["--tokens", "4", "--rounds", "1"], ["way"], id="engine_overhead"),
    pytest.param("api_stream.py", ["--tokens", "4", "--rounds", "1"], ["figure"], id="api_stream"),
    pytest.param("ui_stream.py", ["--tokens", "4", "--rounds", "1", "--history", "4"], ["history"], id="ui_stream"),
    pytest.param("cpu_decode.py", ["--tokens", "4", "--rounds", "1"], ["way"], id="cpu_decode",
                 marks=pytest.mark.skipif(not HAS_LLAMACPP, reason="compares llama.cpp, which bash scripts/setup.sh builds")),
    pytest.param("logprobs.py", ["--tokens", "4", "--rounds", "1", "--backends", "huggingface", *(["llamacpp"] if HAS_LLAMACPP else [])],
                 ["backend"], id="logprobs"),
    pytest.param("llamacpp_batch.py", ["--tokens", "4", "--rounds", "1", "--concurrency", "1", "2"], ["chats"], id="llamacpp_batch",
                 marks=pytest.mark.skipif(not HAS_LLAMACPP, reason="compares llama.cpp, which bash scripts/setup.sh builds")),
    pytest.param("llamacpp_media.py", ["--rounds", "1", "--size", "64"], ["way"], id="llamacpp_media",
                 marks=pytest.mark.skipif(not HAS_LLAMACPP, reason="compares llama.cpp, which bash scripts/setup.sh builds")),
    pytest.param("structured_decode.py", ["--tokens", "8", "--rounds", "1"], ["backend"], id="structured_decode",
                 marks=pytest.mark.skipif(not HAS_LLAMACPP, reason="compares llama.cpp, which bash scripts/setup.sh builds")),
    pytest.param("concurrency.py", ["--tokens", "4", "--rounds", "1", "--concurrency", "1", "2"], ["users"], id="concurrency",
                 marks=pytest.mark.skipif(not HAS_VLLM, reason="compares vLLM: bash scripts/setup.sh --vllm")),
    pytest.param("store.py", ["--tokens", "4", "--rounds", "1", "--messages", "10"], ["way", "database"], id="store"),
    pytest.param("pdf_page_count.py", ["--pages", "50", "--rounds", "1"], ["way"], id="pdf_page_count"),
    pytest.param("soak.py", ["--page-cycles", "1", "--api-disconnects", "1", "--lifetime-cycles", "1", "--cancel-backends", "huggingface",
                             "--lifetime-backends", "huggingface", "--no-kill"], ["figure"], id="soak"),
]


def run_benchmark(script: str, args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``bench/script`` to its end; then whatever it started (an app, vLLM's engine processes,
    Chromium) is killed with it, even where it failed or ran out of time."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           "OMP_WAIT_POLICY": "PASSIVE"}
    command = [sys.executable, str(ROOT / "bench" / script), *args]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.parametrize(("script", "args", "tables"), SMOKE_RUNS)
def test_the_benchmark_runs_and_prints_its_table(script, args, tables):
    done = run_benchmark(script, args)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for first_column in tables:
        rows = table_rows(done.stdout, first_column)
        assert rows is not None, f"{script} printed no table headed {first_column!r}:\n{done.stdout[-3000:]}"
        assert rows, f"{script} printed the header of its table {first_column!r} and no row:\n{done.stdout[-3000:]}"
    assert "FAILED" not in done.stdout, done.stdout[-3000:]


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed: run bench/gpu_smoke.py on its GPU")
def test_the_gpu_smoke_run_refuses_clearly_without_a_gpu():
    """bench/gpu_smoke.py needs an NVIDIA GPU and SGLang: here it says so and exits, running nothing."""
    done = run_benchmark("gpu_smoke.py", ["--backend", "sglang"], timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith("Cannot run the sglang smoke test here: "), done.stdout
