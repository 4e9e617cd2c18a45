"""Several chats at once on llama.cpp: aggregate decode tok/s at 1, 2, 4 and 8 concurrent chats
through our llamacpp engine (one context, one sequence per chat, decoded together), against one
chat, and against bare llama-cpp-python doing the same batched decode with its low-level API.

    OMP_WAIT_POLICY=PASSIVE python bench/llamacpp_batch.py [--tokens 128] [--rounds 3] [--concurrency 1 2 4 8]

Both ways load the embedded GGUF with the same context (8 sequences, each its own KV cache), batch
and threads. The bare way evaluates the chats' prompts (the same token ids as ours) in one batch,
then decodes one token of every chat per llama_decode with a greedy sampler each, every chat
running to as many tokens as it had on our side. Every chat is greedy, each with its own prompt. Rounds are interleaved (each round runs both ways at every concurrency);
figures are medians. Decode tok/s counts all chats' tokens over the time from the first token of
the first chat to the last token, so prompt evaluation is left out on both sides.
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
from harness.markdown_table import markdown_table  # noqa: E402

TOPICS = ["a lighthouse keeper", "a lost robot", "a dragon who cannot fly", "a city under the sea",
          "a baker's apprentice", "a comet", "a haunted library", "two rival chess players"]
SEQUENCES = 8


def messages(user: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a long story about {TOPICS[user % len(TOPICS)]}."}]


async def ours(model: ChatModel, users: int, tokens: int) -> tuple[float, list[int]]:
    """Aggregate decode tok/s of ``users`` chats streamed at once, and each chat's token count."""
    times: list[float] = []
    finished: list = []

    async def one(user: int) -> None:
        async for _ in model.astream_chat(messages(user), temperature=0, max_new_tokens=tokens, on_finish=finished.append):
            times.append(time.perf_counter())

    await asyncio.gather(*(one(user) for user in range(users)))
    counts = [response.response_length for response in finished]
    return (sum(counts) - 1) / (max(times) - min(times)), counts


def bare(llama, prompts: list[list[int]], counts: list[int]) -> float:
    """The same batched greedy decode straight on llama-cpp-python's low-level API, each chat
    running to the token count it had on our side (so both ways decode the same tokens)."""
    from llama_cpp import llama_cpp as lib

    ctx = llama.ctx
    memory = lib.llama_get_memory(ctx)
    for seq in range(len(prompts)):
        lib.llama_memory_seq_rm(memory, seq, 0, -1)
    batch = lib.llama_batch_init(sum(map(len, prompts)), 0, 1)
    samplers = [lib.llama_sampler_init_greedy() for _ in prompts]
    try:
        count, output = 0, {}
        for seq, ids in enumerate(prompts):
            for pos, token in enumerate(ids):
                batch.token[count], batch.pos[count], batch.n_seq_id[count] = token, pos, 1
                batch.seq_id[count][0], batch.logits[count] = seq, pos == len(ids) - 1
                count += 1
            output[seq] = count - 1
        batch.n_tokens = count
        assert lib.llama_decode(ctx, batch) == 0
        started, done = None, [0] * len(prompts)
        while output:
            sampled = {seq: lib.llama_sampler_sample(samplers[seq], ctx, index) for seq, index in output.items()}
            started = started or time.perf_counter()
            output = {}
            for seq, token in sampled.items():
                done[seq] += 1
                if done[seq] < counts[seq]:
                    index = len(output)
                    batch.token[index], batch.pos[index], batch.n_seq_id[index] = token, len(prompts[seq]) + done[seq] - 1, 1
                    batch.seq_id[index][0], batch.logits[index] = seq, True
                    output[seq] = index
            if output:
                batch.n_tokens = len(output)
                assert lib.llama_decode(ctx, batch) == 0
        return (sum(counts) - 1) / (time.perf_counter() - started)
    finally:
        for sampler in samplers:
            lib.llama_sampler_free(sampler)
        lib.llama_batch_free(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()

    from engines.backends.llamacpp import open_llama

    with ChatModel({"infer_backend": "llamacpp", "max_concurrent": SEQUENCES}) as model:
        prompts = [model.engine.tokenizer(model.render_prompt(messages(user)), add_special_tokens=False).input_ids
                   for user in range(SEQUENCES)]
        # The bare context is the one our engine opened (its weights too), with llama-cpp-python's defaults for the rest.
        settings = {key: model.engine.llama_settings[key] for key in ("n_ctx", "n_batch", "n_ubatch", "n_threads", "n_threads_batch")}
        reference = open_llama(str(model.engine.weights_path), {**settings, "verbose": False},
                               SEQUENCES + model.engine.background_sequences)
        try:
            asyncio.run(ours(model, 1, 8))  # warm-up, both ways
            bare(reference, prompts[:1], [8])
            rates: dict[tuple[str, int], list[float]] = {}
            for _ in range(args.rounds):
                for users in args.concurrency:
                    rate, counts = asyncio.run(ours(model, users, args.tokens))
                    rates.setdefault(("ours", users), []).append(rate)
                    rates.setdefault(("bare", users), []).append(bare(reference, prompts[:users], counts))
        finally:
            reference.close()

    median = {key: statistics.median(values) for key, values in rates.items()}
    first = args.concurrency[0]
    print(f"greedy, {args.tokens} tokens per chat, median of {args.rounds} interleaved rounds, "
          f"load average {os.getloadavg()[0]:.1f}, {settings['n_threads']} threads")
    rows = []
    for users in args.concurrency:
        ours_rate, bare_rate = median[("ours", users)], median[("bare", users)]
        rows.append([users, f"{ours_rate:.1f}", f"{bare_rate:.1f}", f"{ours_rate / bare_rate:.2f}", f"{ours_rate / median[('ours', first)]:.2f}"])
    print(markdown_table(["chats", "ours tok/s", "bare tok/s", "ours/bare", f"ours vs {first} chat"], rows))


if __name__ == "__main__":
    main()
