"""Reading long prompts on the embedded GGUF, and the prompt cache across chats.

    OMP_WAIT_POLICY=PASSIVE python bench/prompt_read.py [--lengths 512 2048 4096 7600] [--rounds 2]
                                                        [--chat-tokens 2000] [--chats 1 2 4]

Reading: tokens/s reading a prompt of each length, measured side by side in one process, rounds
interleaved: bare llama-cpp-python on the file as shipped (Q4_1) with its defaults, the same
with flash attention, bare on the Q8_0 conversion our engine reads by default, without flash
attention (our engine's configuration) and with it (the fastest reading of those weights here,
which makes the short steps of a long chat's next turn twice as slow: docs/benchmarks.md), and
our llamacpp engine as the app loads it. Our engine's figure is its prompt length over the time
to its first token (one token written), so it includes everything a request costs; the bare
figures are one llama_eval of the tokens.

The prompt cache: the first token of the next turn of a chat of about ``--chat-tokens`` tokens,
with 1, 2 and 4 such chats taking turns on the default one sequence, against an empty chat's
first token, on llama.cpp and on transformers (its kept DynamicCaches); then, on llama.cpp,
after a restart, with the cache on disk. Memory: the process's resident memory and the cache's,
with the chats in it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402

from engines import ChatModel  # noqa: E402
from engines.model_files.paths import default_gguf  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402

# The engine as the app loads it: Q4_1 read as Q8_0, flash attention off.
LLAMACPP = {"infer_backend": "llamacpp"}
TRANSFORMERS = {"infer_backend": "huggingface"}
EMPTY_CHAT = [{"role": "user", "content": "Hi!"}]


def items_question(tokens: int, topic: str, per_item: float = 9) -> list[dict]:
    """A user message of about ``tokens`` tokens (``per_item`` an item) that the model must read whole."""
    items = max(1, int(tokens / per_item))
    return [{"role": "user", "content": " ".join(f"{topic} {i} weighs {i * 7 % 13} kilograms." for i in range(items))
             + f" Which {topic.lower()} is heaviest?"}]


def sized_question(model: ChatModel, tokens: int, topic: str) -> tuple[list[dict], list[int]]:
    """items_question of ``tokens`` prompt tokens at most, as the model's template and tokenizer count them."""
    def prompt(conversation: list[dict]) -> list[int]:
        return model.engine.tokenizer(model.render_prompt(conversation), add_special_tokens=False).input_ids

    per_item = len(prompt(items_question(900, topic))) / 100
    while True:
        conversation = items_question(tokens, topic, per_item)
        ids = prompt(conversation)
        if len(ids) <= tokens:
            return conversation, ids
        per_item *= len(ids) / tokens * 1.01


def first_token_seconds(model: ChatModel, conversation: list[dict]):
    """Seconds to the first piece of a greedy reply, and the reply (one token more)."""
    started = time.perf_counter()
    [reply] = model.chat(conversation, temperature=0, max_new_tokens=2)
    return time.perf_counter() - started, reply


def reading(lengths: list[int], rounds: int) -> list[dict]:
    import llama_cpp

    with ChatModel(LLAMACPP) as ours:
        converted, settings = str(ours.engine.weights_path), ours.engine.llama_settings
        bare_settings = {"n_ctx": 8192, "n_batch": settings["n_batch"], "n_ubatch": settings["n_ubatch"], "n_threads": settings["n_threads"],
                         "n_threads_batch": settings["n_threads_batch"], "verbose": False}
        bare = {
            "bare, Q4_1 as shipped": llama_cpp.Llama(model_path=str(default_gguf()), **bare_settings),
            "bare, Q4_1, flash attention": llama_cpp.Llama(model_path=str(default_gguf()), flash_attn=True, **bare_settings),
            "bare, Q8_0": llama_cpp.Llama(model_path=converted, **bare_settings),
            "bare, Q8_0, flash attention": llama_cpp.Llama(model_path=converted, flash_attn=True, **bare_settings),
        }
        try:
            rows = []
            for length in lengths:
                rates: dict[str, list[float]] = {name: [] for name in [*bare, "our engine"]}
                for round_number in range(rounds):
                    # A new prompt each round and length: no way reads one it has cached, or a start of one.
                    conversation, tokens = sized_question(ours, length, f"Crate{length}x{round_number}-")
                    for name, llm in bare.items():
                        llm.reset()
                        started = time.perf_counter()
                        llm.eval(tokens)
                        rates[name].append(len(tokens) / (time.perf_counter() - started))
                    seconds, reply = first_token_seconds(ours, conversation)
                    rates["our engine"].append(reply.prompt_length / seconds)
                median = {name: statistics.median(values) for name, values in rates.items()}
                best = max(value for name, value in median.items() if name != "our engine")
                rows.append({"prompt tokens": len(tokens), **{name: f"{value:.0f}" for name, value in median.items()},
                             "ours / bare Q8_0": f"{median['our engine'] / median['bare, Q8_0']:.2f}",
                             "ours / best bare": f"{median['our engine'] / best:.2f}"})
        finally:
            for llm in bare.values():
                llm.close()
    return rows


def taking_turns(settings: dict, chat_tokens: int, chats: list[int], rounds: int) -> tuple[list[dict], dict]:
    rows = []
    with ChatModel(settings) as model:
        empty = statistics.median(first_token_seconds(model, EMPTY_CHAT)[0] for _ in range(3))
        for count in chats:
            conversations = [items_question(chat_tokens, f"Chat{count}x{n}-item") for n in range(count)]
            for conversation in conversations:  # each chat's first turn, read whole
                conversation.append({"role": "assistant", "content": first_token_seconds(model, conversation)[1].response_text})
            seconds = []
            for round_number in range(rounds):
                for conversation in conversations:
                    conversation.append({"role": "user", "content": f"And item {round_number}?"})
                    took, reply = first_token_seconds(model, conversation)
                    conversation.append({"role": "assistant", "content": reply.response_text})
                    seconds.append(took)
            rows.append({"chats taking turns": count, "backend": model.backend, "next turn's first token (s)": f"{statistics.median(seconds):.2f}",
                         "empty chat's (s)": f"{empty:.2f}", "ratio": f"{statistics.median(seconds) / empty:.2f}"})
        held = {"process RSS (MiB)": f"{psutil.Process().memory_info().rss / 2**20:.0f}", "backend": model.backend,
                "prompt cache (MiB)": f"{model.prompt_cache['memory_bytes'] / 2**20:.0f}",
                "conversations kept": model.prompt_cache["conversations"]}
    return rows, held


def after_restart(chat_tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        settings = {**LLAMACPP, "prompt_cache_dir": folder}
        conversation = items_question(chat_tokens, "Parcel")
        with ChatModel(settings) as model:
            read_whole, reply = first_token_seconds(model, conversation)
        conversation += [{"role": "assistant", "content": reply.response_text}, {"role": "user", "content": "And the lightest?"}]
        with ChatModel(settings) as restarted:
            empty = first_token_seconds(restarted, EMPTY_CHAT)[0]
            from_disk = first_token_seconds(restarted, conversation)[0]
    return {"first turn, read whole (s)": f"{read_whole:.2f}", "next turn after a restart (s)": f"{from_disk:.2f}",
            "empty chat's (s)": f"{empty:.2f}", "ratio": f"{from_disk / empty:.2f}"}


def table(rows: list[dict]) -> str:
    return markdown_table(list(rows[0]), [list(row.values()) for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4096, 7600])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chat-tokens", type=int, default=2000)
    parser.add_argument("--chats", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    print("\nReading a prompt (tokens/s, median of rounds)\n")
    print(table(reading(args.lengths, args.rounds)))
    turns, held = zip(*(taking_turns(settings, args.chat_tokens, args.chats, args.rounds) for settings in (LLAMACPP, TRANSFORMERS)))
    print(f"\nChats of about {args.chat_tokens} tokens taking turns on one sequence (the prompt cache)\n")
    print(table([row for rows in turns for row in rows]))
    print("\nWith the prompt cache on disk, after a restart (llama.cpp)\n")
    print(table([after_restart(args.chat_tokens)]))
    print("\nMemory with the chats kept\n")
    print(table(list(held)))


if __name__ == "__main__":
    main()
