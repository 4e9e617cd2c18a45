"""Several users at once: aggregate tokens/s and time to first token for 1, 4 and 8 concurrent
chats through ChatModel on the HF engine and on the vLLM engine, with vLLM's bare AsyncLLM as the
reference, all in one run. The bare way calls the very AsyncLLM our engine opened, on the loop it
runs on, with the same token prompts (as bench/llamacpp_batch.py does with llama.cpp's context): the
same engine process and settings on both sides, so the ratio is our layer alone, and one vLLM start
serves both.

    OMP_WAIT_POLICY=PASSIVE python bench/concurrency.py [--tokens 64] [--rounds 2] [--concurrency 1 4 8]

Every chat is greedy, each user with a different prompt. Rounds are interleaved (each round runs
every way at every concurrency) so machine noise hits all ways alike; figures are medians. The
warm-up sends every user's prompt each way, so that vLLM's prefix cache holds them all for both.
Prints the vLLM engine's ratio to bare vLLM (target 0.95 or more) and vLLM over HF.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(tempfile.gettempdir(), "anychat-bench-vllm-cache"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engines import ChatModel  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.vllm_settings import VLLM  # noqa: E402

TOPICS = ["a lighthouse keeper", "a lost robot", "a dragon who cannot fly", "a city under the sea",
          "a baker's apprentice", "a comet", "a haunted library", "two rival chess players"]
# The tests' settings (harness/vllm_settings.py), in bf16; max_concurrent becomes the most users a round runs.
VLLM_SETTINGS = {**VLLM, "infer_dtype": "bfloat16"}


def messages(user: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a long story about {TOPICS[user % len(TOPICS)]}."}]


async def ours(model: ChatModel, users: int, tokens: int) -> tuple[float, float, int]:
    """(wall seconds, mean TTFT seconds, tokens generated) for ``users`` concurrent streams."""
    async def one(user: int) -> tuple[float, int]:
        finished = []
        first = None
        async for _ in model.astream_chat(messages(user), temperature=0, max_new_tokens=tokens, on_finish=finished.append):
            first = first or time.perf_counter()
        return first - started, finished[0].response_length

    started = time.perf_counter()
    results = await asyncio.gather(*(one(u) for u in range(users)))
    return time.perf_counter() - started, statistics.mean(t for t, _ in results), sum(n for _, n in results)


async def bare(engine, prompts: list[list[int]], users: int, tokens: int) -> tuple[float, float, int]:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(temperature=0.0, max_tokens=tokens, output_kind=RequestOutputKind.DELTA)

    async def one(user: int) -> tuple[float, int]:
        first, count = None, 0
        async for output in engine.generate({"prompt_token_ids": prompts[user]}, params, uuid.uuid4().hex):
            count += len(output.outputs[0].token_ids)
            if output.outputs[0].text:
                first = first or time.perf_counter()
        return first - started, count

    started = time.perf_counter()
    results = await asyncio.gather(*(one(u) for u in range(users)))
    return time.perf_counter() - started, statistics.mean(t for t, _ in results), sum(n for _, n in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    most = max(args.concurrency)

    loop = asyncio.new_event_loop()
    hf = ChatModel({"infer_backend": "huggingface", "max_concurrent": most})
    ours_vllm = ChatModel({**VLLM_SETTINGS, "max_concurrent": most})
    tokenizer = ours_vllm.engine.tokenizer
    prompts = [tokenizer(ours_vllm.render_prompt(messages(u)), add_special_tokens=False).input_ids
               for u in range(most)]
    ways = {
        "HF ChatModel": lambda users: ours(hf, users, args.tokens),
        "vLLM ChatModel": lambda users: ours(ours_vllm, users, args.tokens),
        # Held by name only while it runs: ours_vllm.close() then frees the engine while vLLM's modules are alive.
        "bare AsyncLLM": lambda users: bare(ours_vllm.engine.model, prompts, users, args.tokens),
    }
    # The bare way on the loop our engine runs on, where its AsyncLLM must be called (its output
    # handler lives there); ours from this loop, as a caller of ChatModel runs.
    runs_on = {name: ours_vllm._loop.call if name == "bare AsyncLLM" else loop.run_until_complete for name in ways}
    for name, run in ways.items():  # warm-up
        runs_on[name](run(most))
    results = {(name, users): [] for name in ways for users in args.concurrency}
    for round_number in range(args.rounds):
        for users in args.concurrency:
            for name, run in ways.items():
                results[name, users].append(runs_on[name](run(users)))
        print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)

    print(f"greedy, {args.tokens} new tokens per chat, median of {args.rounds} interleaved rounds")
    rows, summary = [], []
    for users in args.concurrency:
        rates = {}
        for name in ways:
            runs = results[name, users]
            rates[name] = statistics.median(count / wall for wall, _, count in runs)
            ttft = statistics.median(first for _, first, _ in runs) * 1000
            rows.append([users, name, f"{rates[name]:.2f}", f"{ttft:.1f}", runs[0][2]])
        summary.append(f"{users} users: vLLM engine / bare vLLM = {rates['vLLM ChatModel'] / rates['bare AsyncLLM']:.3f}, "
                       f"vLLM engine / HF engine = {rates['vLLM ChatModel'] / rates['HF ChatModel']:.2f}")
    print(markdown_table(["users", "way", "tok/s", "TTFT ms", "tokens"], rows))
    print("\n".join(summary))

    ours_vllm.close()
    hf.close()
    loop.close()


if __name__ == "__main__":
    main()
