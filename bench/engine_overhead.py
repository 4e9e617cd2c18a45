"""What the engine layer costs over bare ``model.generate``, measured side by side in one run.

    OMP_WAIT_POLICY=PASSIVE python bench/engine_overhead.py [--tokens 128] [--rounds 3]

Greedy decoding of the same prompt gives the same tokens every way, so the work is identical;
rounds are interleaved so that machine noise hits all three ways alike. Prints medians and
the ratios of ours to bare, and the process's CPU time per token: on a busy machine wall-clock
rates follow the neighbours, while CPU time still shows what our layer itself costs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

from engines import ChatModel  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402

MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


class FirstTokenClock(BaseStreamer):
    """Notes when the first new token exists; does nothing else."""

    def __init__(self) -> None:
        self.calls = 0
        self.first_token_at = None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        pass


def bare_generate(model, tokenizer, tokens: int) -> tuple[float, float, int]:
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    input_ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    clock = FirstTokenClock()
    started = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=tokens,
                                do_sample=False, streamer=clock, pad_token_id=tokenizer.pad_token_id)
    total = time.perf_counter() - started
    count = output.shape[1] - input_ids.shape[1]
    return clock.first_token_at - started, total, count


def ours_sync(chat_model: ChatModel, tokens: int) -> tuple[float, float, int]:
    finished = []
    started = time.perf_counter()
    first = None
    for _ in chat_model.stream_chat(MESSAGES, temperature=0, max_new_tokens=tokens, on_finish=finished.append):
        first = first or time.perf_counter()
    return first - started, time.perf_counter() - started, finished[0].response_length


def ours_async(chat_model: ChatModel, tokens: int) -> tuple[float, float, int]:
    async def run():
        finished = []
        started = time.perf_counter()
        first = None
        async for _ in chat_model.astream_chat(MESSAGES, temperature=0, max_new_tokens=tokens, on_finish=finished.append):
            first = first or time.perf_counter()
        return first - started, time.perf_counter() - started, finished[0].response_length

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    chat_model = ChatModel({"infer_backend": "huggingface"})
    path = chat_model.engine.model_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype="auto").eval()
    ways = {"bare generate": lambda: bare_generate(model, tokenizer, args.tokens),
            "ChatModel.stream_chat": lambda: ours_sync(chat_model, args.tokens),
            "ChatModel.astream_chat": lambda: ours_async(chat_model, args.tokens)}
    for run in ways.values():  # warm-up
        run()
    results = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, run in ways.items():
            cpu_started = time.process_time()
            first, total, count = run()
            results[name].append((first, total, count, time.process_time() - cpu_started))

    print(f"greedy, {args.tokens} new tokens, {torch.get_num_threads()} threads, median of {args.rounds} interleaved rounds")
    print(f"load average {os.getloadavg()[0]:.1f}")
    rows = []
    bare_rate = bare_ttft = bare_cpu = None
    for name, runs in results.items():
        rate = statistics.median(count / total for _, total, count, _ in runs)
        ttft = statistics.median(first for first, _, _, _ in runs) * 1000
        cpu = statistics.median(cpu / count for _, _, count, cpu in runs) * 1000
        count = runs[0][2]
        bare_rate, bare_ttft, bare_cpu = bare_rate or rate, bare_ttft if bare_ttft is not None else ttft, bare_cpu or cpu
        rows.append([name, f"{rate:.2f}", f"{ttft:.1f}", count, f"{rate / bare_rate:.3f}", f"{ttft - bare_ttft:+.1f}", f"{cpu:.1f}",
                     f"{cpu / bare_cpu:.3f}"])
    print(markdown_table(["way", "tok/s", "TTFT ms", "tokens", "tok/s ratio", "TTFT +ms", "CPU ms/tok", "CPU ratio"], rows))
    chat_model.close()


if __name__ == "__main__":
    main()
