"""CPU decoding on the embedded GGUF: bare llama-cpp-python, our llamacpp engine, our HF engine.

    OMP_WAIT_POLICY=PASSIVE python bench/cpu_decode.py [--tokens 128] [--rounds 3]

Decode speed and time to first token are measured in one process with the three ways loaded
side by side, rounds interleaved so machine noise hits them alike. Each round asks a new prompt
(the same for all three ways), so no way answers from a prompt it has cached. Load time and
resident memory are measured in a fresh process per way (load, then one short reply), since
in one process the ways share imports and heap.

Decode tok/s counts the tokens after the first over the time after the first: the model's
generation rate, apart from the prompt's evaluation (which time to first token shows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402

from engines import ChatModel  # noqa: E402
from harness.embedded_weights import embedded_weights  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402

QUESTION = "Write a long story about a lighthouse keeper and a storm."
# SmolLM2's trained context, which our llamacpp engine takes by default where memory allows.
CONTEXT = 8192
WAYS = ("bare llama-cpp-python", "our llamacpp engine", "our HF engine")
# A way yields the reply's pieces as they come.
Way = Callable[[list[dict], int], Iterator[object]]


def messages(round_number: int) -> list[dict]:
    return [{"role": "user", "content": f"(Story {round_number}.) {QUESTION}"}]


def open_way(name: str) -> tuple[Way, Callable[[], None]]:
    """The way's streaming call and its close. The bare way is llama-cpp-python as its own docs
    use it (create_chat_completion, with the chat template the GGUF carries), given the weights,
    context, batch and threads our engine takes by default here."""
    if name == "bare llama-cpp-python":
        from engines.backends.llamacpp import DEFAULT_BATCH, default_threads, open_llama

        threads = default_threads()
        # Llama() itself, with llama.cpp's weight-repacking buffers off on CPUs with AMX, where
        # llama.cpp 0.3.36 dies on the first evaluation (SIGILL or SIGSEGV) without it.
        bare = open_llama(str(embedded_weights()), {"n_ctx": CONTEXT, "n_batch": DEFAULT_BATCH, "n_threads": threads,
                                                "n_threads_batch": psutil.cpu_count(logical=False), "verbose": False})

        def bare_stream(conversation: list[dict], tokens: int) -> Iterator[object]:
            chunks = bare.create_chat_completion(conversation, max_tokens=tokens, temperature=0, stream=True)
            return (chunk for chunk in chunks if chunk["choices"][0]["delta"].get("content"))

        return bare_stream, bare.close
    model = ChatModel({"infer_backend": "llamacpp" if name == "our llamacpp engine" else "huggingface"})
    if name == "our llamacpp engine":
        assert model.context_length == CONTEXT, "the bare way would not run with our engine's context"
    return lambda conversation, tokens: model.stream_chat(conversation, temperature=0, max_new_tokens=tokens), model.close


def timed(way: Way, conversation: list[dict], tokens: int) -> tuple[float, float, int]:
    """Time to the first piece, tokens/s after it, and the pieces counted (one per token)."""
    started = time.perf_counter()
    first = None
    count = 0
    for _ in way(conversation, tokens):
        count += 1
        first = first or time.perf_counter()
    return first - started, (count - 1) / (time.perf_counter() - first), count


def load_in_fresh_process(name: str) -> dict:
    """Run this file in a child that loads only ``name`` and answers once."""
    child = subprocess.run([sys.executable, __file__, "--load-only", name], capture_output=True, text=True, check=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


def load_only(name: str) -> None:
    before = psutil.Process().memory_info().rss
    started = time.perf_counter()
    way, close = open_way(name)
    loaded = time.perf_counter() - started
    for _ in way(messages(0), 16):
        pass
    print(json.dumps({"load_s": loaded, "rss_mib": psutil.Process().memory_info().rss / 2**20,
                      "rss_added_mib": (psutil.Process().memory_info().rss - before) / 2**20}))
    close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--load-only", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_only:
        load_only(args.load_only)
        return

    from engines.backends.llamacpp import default_threads

    threads = default_threads()
    loads = {name: load_in_fresh_process(name) for name in WAYS}
    opened = {name: open_way(name) for name in WAYS}
    for way, _ in opened.values():  # warm-up
        timed(way, messages(0), 8)
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in WAYS}
    for round_number in range(1, args.rounds + 1):
        for name in WAYS:
            results[name].append(timed(opened[name][0], messages(round_number), args.tokens))
    for _, close in opened.values():
        close()

    print(f"greedy, up to {args.tokens} new tokens, median of {args.rounds} interleaved rounds, "
          f"load average {os.getloadavg()[0]:.1f}, {psutil.cpu_count(logical=False)} physical cores, llama.cpp on {threads} threads")
    rate = {name: statistics.median(r for _, r, _ in runs) for name, runs in results.items()}
    rows = []
    for name, runs in results.items():
        ttft = statistics.median(t for t, _, _ in runs) * 1000
        rows.append([name, f"{rate[name]:.1f}", f"{ttft:.0f}", runs[0][2], f"{rate[name] / rate[WAYS[0]]:.2f}", f"{rate[name] / rate[WAYS[2]]:.2f}",
                     f"{loads[name]['load_s']:.1f}", f"{loads[name]['rss_mib']:.0f}"])
    print(markdown_table(["way", "decode tok/s", "TTFT ms", "tokens", "vs bare", "vs HF", "load s", "RSS MiB"], rows))


if __name__ == "__main__":
    main()
