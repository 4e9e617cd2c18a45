"""Streaming through the OpenAI-compatible API against ChatModel directly, side by side in one run.

    python bench/api_stream.py [--rounds 5] [--tokens 128] [--model PATH]

The API runs as `python app.py api` in its own process (as users run it) and is read with the
official `openai` client; ChatModel runs in this process. Rounds alternate which side goes
first, each with the same greedy request. Reported: time to first token, decode tokens/s after
the first token, and the API / direct ratios (target: 0.95 or more for tokens/s), and the CPU
time each side spends per token (all processes and threads: model, server, client), which tells
apart the API's own cost from other load on the machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
import psutil  # noqa: E402

from engines import ChatModel, Response  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402

MESSAGES = [{"role": "user", "content": "Write the numbers from 1 to 1000, separated by commas."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_api(model: str | None, port: int) -> subprocess.Popen:
    command = [sys.executable, "app.py", "api", "--port", str(port)] + (["--model", model] if model else [])
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
        if "OpenAI-compatible API on" in line:
            return process
    raise SystemExit(f"the API server exited with {process.wait()}")


def cpu_seconds(*processes: psutil.Process) -> float:
    return sum(sum(process.cpu_times()[:2]) for process in processes)


def timed_direct(chat_model: ChatModel, tokens: int) -> tuple[float, float, int]:
    finished: list[Response] = []
    started = time.perf_counter()
    first = None
    for piece in chat_model.stream_chat(MESSAGES, on_finish=finished.append, temperature=0, max_new_tokens=tokens):
        if first is None and piece:
            first = time.perf_counter()
    ended = time.perf_counter()
    return first - started, (finished[0].response_length - 1) / (ended - first), finished[0].response_length


def timed_api(client: openai.OpenAI, model_id: str, tokens: int, messages: list[dict] = MESSAGES) -> tuple[float, float, int]:
    started = time.perf_counter()
    first, usage = None, None
    stream = client.chat.completions.create(
        model=model_id, messages=messages, temperature=0, max_tokens=tokens, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
        usage = chunk.usage or usage
    ended = time.perf_counter()
    return first - started, (usage.completion_tokens - 1) / (ended - first), usage.completion_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--model", default=None, help="model path (default: the embedded SmolLM2)")
    args = parser.parse_args()

    port = free_port()
    server = start_api(args.model, port)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600)
        model_id = client.models.list().data[0].id
        with ChatModel({"model_name_or_path": args.model} if args.model else None) as chat_model:
            timed_direct(chat_model, 8)  # warm-up, both sides
            timed_api(client, model_id, 8)
            this, serving = psutil.Process(), psutil.Process(server.pid)
            direct, api = [], []
            cpu = {"direct": [0.0, 0], "api": [0.0, 0]}
            for round_index in range(args.rounds):
                runs = [
                    ("direct", direct, lambda: timed_direct(chat_model, args.tokens)),
                    ("api", api, lambda: timed_api(client, model_id, args.tokens)),
                ]
                for side, results, run in runs if round_index % 2 == 0 else runs[::-1]:
                    before = cpu_seconds(this, serving)
                    results.append(run())
                    cpu[side][0] += cpu_seconds(this, serving) - before
                    cpu[side][1] += results[-1][2]
    finally:
        server.terminate()
        server.wait(30)

    ttft_direct, ttft_api = (statistics.median(r[0] for r in results) for results in (direct, api))
    rate_direct, rate_api = (statistics.median(r[1] for r in results) for results in (direct, api))
    print(f"{args.rounds} rounds, {args.tokens} tokens each, greedy, medians")
    per_token = {side: seconds / tokens * 1000 for side, (seconds, tokens) in cpu.items()}
    print(markdown_table(["figure", "ChatModel", "API", "ratio (higher is better)"], [
        ["time to first token", f"{ttft_direct * 1000:.0f} ms", f"{ttft_api * 1000:.0f} ms", f"{ttft_direct / ttft_api:.2f} (direct/API)"],
        ["decode tokens/s", f"{rate_direct:.1f}", f"{rate_api:.1f}", f"{rate_api / rate_direct:.2f} (API/direct)"],
        ["CPU ms per token", f"{per_token['direct']:.1f}", f"{per_token['api']:.1f}", f"{per_token['direct'] / per_token['api']:.2f} (direct/API)"],
    ]))
    print(f"load average while running: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
