"""What asking for logprobs costs: decode speed with none, with the chosen token's only
(logprobs=0) and with 20 alternatives, on the llamacpp and HF engines, on the embedded model.

    OMP_WAIT_POLICY=PASSIVE python bench/logprobs.py [--tokens 128] [--rounds 3] [--backends llamacpp huggingface]

Each backend is loaded once and the three settings run in interleaved rounds (a new prompt each
round, the same for all three), so machine noise hits them alike. Decode tok/s counts the tokens
after the first over the time after the first; the ratio is against no logprobs on the same
backend in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engines import ChatModel  # noqa: E402
from engines.logprobs import MAX_TOP_LOGPROBS  # noqa: E402
from engines.prompt.reply_parser import ReplyChunk  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402

QUESTION = "Write a long story about a lighthouse keeper and a storm."
SETTINGS = {"no logprobs": None, "logprobs=0": 0, f"logprobs={MAX_TOP_LOGPROBS}": MAX_TOP_LOGPROBS}


def decode_rate(model: ChatModel, round_number: int, tokens: int, logprobs: int | None) -> float:
    """Tokens per second after the first, counted from the streamed pieces (one per token)."""
    messages = [{"role": "user", "content": f"(Story {round_number}.) {QUESTION}"}]
    first, count = None, 0
    for item in model.stream_reply(messages, temperature=0, max_new_tokens=tokens, logprobs=logprobs):
        if isinstance(item, ReplyChunk):
            count += 1
            first = first or time.perf_counter()
    return (count - 1) / (time.perf_counter() - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=["llamacpp", "huggingface"])
    args = parser.parse_args()
    rows = []
    for backend in args.backends:
        with ChatModel({"infer_backend": backend}) as model:
            decode_rate(model, 0, 8, MAX_TOP_LOGPROBS)  # warm-up
            rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
            for round_number in range(1, args.rounds + 1):
                for name, logprobs in SETTINGS.items():
                    rates[name].append(decode_rate(model, round_number, args.tokens, logprobs))
        baseline = statistics.median(rates["no logprobs"])
        rows += [(backend, name, statistics.median(values), statistics.median(values) / baseline) for name, values in rates.items()]
    print(f"\n{args.tokens} tokens, greedy, median of {args.rounds} rounds\n")
    print(markdown_table(["backend", "setting", "decode tok/s", "ratio to no logprobs"],
                         [[backend, name, f"{rate:.1f}", f"{ratio:.2f}"] for backend, name, rate, ratio in rows]))


if __name__ == "__main__":
    main()
