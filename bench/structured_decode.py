"""Decoding under a JSON schema against free text, per backend, and the time to compile a schema.

    OMP_WAIT_POLICY=PASSIVE python bench/structured_decode.py [--tokens 160] [--rounds 3] [--backends llamacpp huggingface]

For each backend the default model is loaded once. Each round, for each of a few schemas of
harness/reply_schemas.py, the same question is answered greedily twice, interleaved: under the
schema (llama.cpp's grammar sampler; xgrammar's logits processor on transformers), then as free
text to the same number of tokens. Decode tok/s counts the tokens after the first over the time
from the first piece to the last, so prompt evaluation is left out on both sides; figures are
medians over schemas and rounds. Compile time is the backend compiling each schema afresh
(llama.cpp: our GBNF from llama-cpp-python's converter, parsed by llama.cpp's grammar sampler;
transformers: xgrammar), after one warm-up compile that builds the tokenizer's tables.
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

from engines import ChatModel  # noqa: E402
from engines.reply_format import ReplyFormat  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from harness.reply_schemas import SCHEMAS, question  # noqa: E402

BENCH_SCHEMAS = ["list of objects", "address", "references", "matrix", "deep nesting"]


async def decode_rate(model: ChatModel, name: str, tokens: int, **options) -> tuple[float, int]:
    """Decode tok/s of one greedy reply to ``name``'s question, and its token count."""
    times: list[float] = []
    finished: list = []
    async for _ in model.astream_chat(question(name), temperature=0, max_new_tokens=tokens, on_finish=finished.append, **options):
        times.append(time.perf_counter())
    count = finished[0].response_length
    return ((count - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else float("nan")), count


def compile_ms(model: ChatModel, name: str) -> float:
    reply_format = ReplyFormat.json_schema(SCHEMAS[name], name)
    started = time.perf_counter()
    model.engine._compile_reply_format(reply_format)
    return (time.perf_counter() - started) * 1000


def measure(backend: str, tokens: int, rounds: int) -> dict[str, float]:
    with ChatModel({"infer_backend": backend}) as model:
        compile_ms(model, BENCH_SCHEMAS[0])  # the tokenizer's tables, built once per model
        compiled = [compile_ms(model, name) for name in SCHEMAS]
        asyncio.run(decode_rate(model, BENCH_SCHEMAS[0], 4))  # warm-up
        schema_rates, free_rates, counts = [], [], []
        for _ in range(rounds):
            for name in BENCH_SCHEMAS:
                response_format = {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}
                rate, count = asyncio.run(decode_rate(model, name, tokens, response_format=response_format))
                free, _ = asyncio.run(decode_rate(model, name, max(count, 2)))
                schema_rates.append(rate)
                free_rates.append(free)
                counts.append(count)
    ratios = [s / f for s, f in zip(schema_rates, free_rates)]
    return {
        "free": statistics.median(free_rates), "schema": statistics.median(schema_rates), "ratio": statistics.median(ratios),
        "tokens": statistics.median(counts), "compile": statistics.median(compiled), "compile_max": max(compiled),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["llamacpp", "huggingface"])
    args = parser.parse_args()

    results = {backend: measure(backend, args.tokens, args.rounds) for backend in args.backends}
    print(f"greedy, up to {args.tokens} tokens, {len(BENCH_SCHEMAS)} schemas x {args.rounds} rounds (medians), "
          f"compile over all {len(SCHEMAS)} test schemas, load average {os.getloadavg()[0]:.1f}")
    print(markdown_table(["backend", "free tok/s", "schema tok/s", "schema/free", "tokens", "compile ms", "worst ms"], [
        [backend, f"{r['free']:.1f}", f"{r['schema']:.1f}", f"{r['ratio']:.2f}", f"{r['tokens']:.0f}", f"{r['compile']:.1f}", f"{r['compile_max']:.1f}"]
        for backend, r in results.items()
    ]))


if __name__ == "__main__":
    main()
