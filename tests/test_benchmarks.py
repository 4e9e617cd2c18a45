"""Every benchmark in bench/ runs here at a tiny count, so that none can rot unseen: it must exit
cleanly and print its table with at least one row, and no figure of it may say FAILED. No timing is
asserted (timings belong to full runs, side by side). The runs share one interpreter
(tests/benchmark_worker.py), which imports torch, transformers and gradio once for all of them;
each run is still a script run as `python bench/X.py` would run it, and whatever it started is
stopped after it."""

from __future__ import annotations

import importlib.util

import pytest

from harness.markdown_table import table_rows
from tests.benchmark_worker import BenchmarkWorker, Finished

# The benchmarks start apps, Chromium and vLLM engines of their own.
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.vllm]

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_LLAMACPP = importlib.util.find_spec("llama_cpp") is not None
NEEDS_LLAMACPP = pytest.mark.skipif(not HAS_LLAMACPP, reason="compares llama.cpp, which bash scripts/setup.sh builds")

# Each benchmark with the arguments of its smoke run, and the first column of each of its tables.
SMOKE_RUNS = [
    pytest.param("engine_overhead.py", ["--tokens", "4", "--rounds", "1"], ["way"], id="engine_overhead"),
    pytest.param("api_stream.py", ["--tokens", "4", "--rounds", "1"], ["figure"], id="api_stream"),
    pytest.param("remote_stream.py", ["--tokens", "4", "--rounds", "1"], ["way"], id="remote_stream"),
    pytest.param("ui_stream.py", ["--tokens", "4", "--rounds", "1", "--history", "4"], ["history"], id="ui_stream"),
    pytest.param("ui_stream.py", ["--tokens", "4", "--rounds", "1", "--history", "4", "--remote", "--no-browser"], ["history"],
                 id="ui_stream_remote"),
    pytest.param("cpu_decode.py", ["--tokens", "4", "--rounds", "1"], ["way"], id="cpu_decode", marks=NEEDS_LLAMACPP),
    pytest.param("logprobs.py", ["--tokens", "4", "--rounds", "1", "--backends", "huggingface", *(["llamacpp"] if HAS_LLAMACPP else [])],
                 ["backend"], id="logprobs"),
    pytest.param("llamacpp_batch.py", ["--tokens", "4", "--rounds", "1", "--concurrency", "1", "2"], ["chats"], id="llamacpp_batch",
                 marks=NEEDS_LLAMACPP),
    pytest.param("llamacpp_media.py", ["--rounds", "1", "--size", "64"], ["way"], id="llamacpp_media", marks=NEEDS_LLAMACPP),
    pytest.param("structured_decode.py", ["--tokens", "8", "--rounds", "1"], ["backend"], id="structured_decode", marks=NEEDS_LLAMACPP),
    pytest.param("concurrency.py", ["--tokens", "4", "--rounds", "1", "--concurrency", "1", "2"], ["users"], id="concurrency",
                 marks=pytest.mark.skipif(not HAS_VLLM, reason="compares vLLM: bash scripts/setup.sh --vllm")),
    pytest.param("remote_concurrency.py", ["--tokens", "4", "--rounds", "1", "--users", "2"], ["way"], id="remote_concurrency",
                 marks=pytest.mark.skipif(not HAS_VLLM, reason="compares vLLM: bash scripts/setup.sh --vllm")),
    pytest.param("prompt_read.py", ["--lengths", "64", "--rounds", "1", "--chat-tokens", "150", "--chats", "2"],
                 ["prompt tokens", "chats taking turns", "first turn, read whole (s)", "process RSS (MiB)"], id="prompt_read", marks=NEEDS_LLAMACPP),
    pytest.param("compaction.py", ["--contexts", "1024", "--turns", "6", "--max-concurrent", "1"], ["context", "context"], id="compaction",
                 marks=NEEDS_LLAMACPP),
    pytest.param("tool_loop.py", ["--rounds", "1", "--tool-ms", "10"], ["figure"], id="tool_loop", marks=NEEDS_LLAMACPP),
    pytest.param("store.py", ["--tokens", "4", "--rounds", "1", "--messages", "10"], ["way", "database"], id="store"),
    pytest.param("start.py", ["--rounds", "1"], ["way"], id="start", marks=NEEDS_LLAMACPP),
    pytest.param("model_switch.py", ["--rounds", "1", "--tokens", "4"], ["way"], id="model_switch", marks=NEEDS_LLAMACPP),
    pytest.param("library.py", ["--pages", "4", "--rounds", "1", *(["--reply-tokens", "4"] if HAS_LLAMACPP else [])],
                 ["database", "ranking", *(["embedding"] if HAS_LLAMACPP else [])], id="library"),
    pytest.param("pdf_page_count.py", ["--pages", "50", "--rounds", "1"], ["way"], id="pdf_page_count"),
    pytest.param("soak.py", ["--page-cycles", "1", "--api-disconnects", "1", "--lifetime-cycles", "1", "--cancel-backends", "huggingface",
                             "--lifetime-backends", "huggingface", "--no-kill"], ["figure"], id="soak"),
]


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    worker = BenchmarkWorker(tmp_path_factory.mktemp("benchmark-worker"))
    yield worker
    worker.stop()


def output(done: Finished) -> str:
    return f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize(("script", "args", "tables"), SMOKE_RUNS)
def test_the_benchmark_runs_and_prints_its_table(worker, tmp_path, script, args, tables):
    done = worker.run(script, args, tmp_path, timeout=900)
    assert done.returncode == 0, f"{script} {'ran out of time' if done.returncode is None else f'exited with {done.returncode}'}:\n{output(done)}"
    for first_column in tables:
        rows = table_rows(done.stdout, first_column)
        assert rows is not None, f"{script} printed no table headed {first_column!r}:\n{output(done)}"
        assert rows, f"{script} printed the header of its table {first_column!r} and no row:\n{output(done)}"
    assert "FAILED" not in done.stdout, done.stdout[-3000:]


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed: run bench/gpu_smoke.py on its GPU")
def test_the_gpu_smoke_run_refuses_clearly_without_a_gpu(worker, tmp_path):
    """bench/gpu_smoke.py needs an NVIDIA GPU and SGLang: here it says so and exits, running nothing."""
    done = worker.run("gpu_smoke.py", ["--backend", "sglang"], tmp_path, timeout=120)
    assert done.returncode == 2, output(done)
    assert done.stdout.startswith("Cannot run the sglang smoke test here: "), done.stdout
