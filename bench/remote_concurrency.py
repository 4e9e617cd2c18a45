"""Several chats at once through anychat's remote backend against the same chats straight to
`vllm serve`, side by side in one run: aggregate tokens/s (aim: 0.95 of straight or more).

    OMP_WAIT_POLICY=PASSIVE python bench/remote_concurrency.py [--tokens 64] [--rounds 3] [--users 8]

One `vllm serve` on the embedded model (harness/vllm_server.py) serves both ways: ``straight``, the
official async openai client sending every chat at once; ``anychat``, ChatModel on the remote
backend (max_concurrent = the chats, so its line sends them all at once) in this process. Every
chat is greedy, each with its own prompt; rounds alternate which way goes first; medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import openai  # noqa: E402

from bench.concurrency import messages, ours  # noqa: E402
from engines import ChatModel  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.vllm_server import MODEL, VllmServer  # noqa: E402

KEY = "bench-key"


async def straight(client: openai.AsyncOpenAI, users: int, tokens: int) -> tuple[float, float, int]:
    """(wall seconds, mean time to first token, tokens written) for ``users`` chats sent at once."""
    async def one(user: int) -> tuple[float, int]:
        first, usage = None, None
        stream = await client.chat.completions.create(model=MODEL, messages=messages(user), temperature=0, max_tokens=tokens, stream=True,
                                                      stream_options={"include_usage": True})
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
            usage = chunk.usage or usage
        return first - started, usage.completion_tokens

    started = time.perf_counter()
    results = await asyncio.gather(*(one(user) for user in range(users)))
    return time.perf_counter() - started, statistics.mean(t for t, _ in results), sum(n for _, n in results)


async def measure(args: argparse.Namespace, server: VllmServer) -> dict[str, list[tuple[float, float, int]]]:
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=600)
    with ChatModel({"model_name_or_path": f"{server.url}/v1", "remote_api_key": KEY, "max_concurrent": args.users}) as model:
        ways = {"straight": lambda: straight(client, args.users, args.tokens), "anychat": lambda: ours(model, args.users, args.tokens)}
        for run in ways.values():  # warm-up: every prompt in vLLM's prefix cache for both ways
            await run()
        results: dict[str, list[tuple[float, float, int]]] = {way: [] for way in ways}
        for round_index in range(args.rounds):
            for way in list(ways) if round_index % 2 == 0 else list(ways)[::-1]:
                results[way].append(await ways[way]())
    await client.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        with VllmServer(Path(temp) / "vllm.log", KEY, max_num_seqs=args.users) as server:
            results = asyncio.run(measure(args, server))
    rate = {way: statistics.median(tokens / wall for wall, _, tokens in runs) for way, runs in results.items()}
    first = {way: statistics.median(ttft for _, ttft, _ in runs) for way, runs in results.items()}
    print(f"{args.users} chats at once, {args.tokens} tokens each, greedy, {args.rounds} rounds, medians")
    print(markdown_table(["way", "aggregate tokens/s", "vs straight", "mean time to first token"], [
        [way, f"{rate[way]:.1f}", f"{rate[way] / rate['straight']:.2f}", f"{first[way] * 1000:.0f} ms"] for way in results
    ]))
    print(f"load average while running: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
