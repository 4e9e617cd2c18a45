"""Long chats past the context (engines/compaction.py) on the embedded GGUF, llama.cpp.

    OMP_WAIT_POLICY=PASSIVE python bench/compaction.py [--contexts 2048 8192] [--turns 40]

For each context length: a chat of ``--turns`` turns (user messages of about 120 tokens, greedy
replies of at most 48), compacted as the page compacts it. Reported: the turns before the first
compaction and between two; how long writing the summary took; the first token of the turn that
compacted, after its summary (its new prompt read whole), and of the turn after it, against the
median first token of the chat's other turns (each a turn of about the same length, its start in
the cache); and another chat's first token while a compaction runs, against the same chat's alone.
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

from engines import ChatModel, ChatRequest, ReplyChunk  # noqa: E402
from engines.compaction import Compaction  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402

SYSTEM = "You are a helpful assistant."
REPLY_TOKENS = 48
# Another chat's first tokens timed while one summary is written (its median is reported).
DURING_SAMPLES = 5


def user_message(turn: int) -> str:
    return f"Log entry {turn}: " + " ".join(f"the keeper saw ship {turn}-{i} pass the rocks at dawn." for i in range(10)) + " What now?"


async def timed_turn(model: ChatModel, history: list[dict]) -> tuple[float, float, Compaction | None, str]:
    """One turn: seconds to its first word counted from the start and from the end of its
    compaction (the same where there was none), its compaction, and the reply."""
    request = ChatRequest.build(history, context_policy="compact", temperature=0, max_new_tokens=REPLY_TOKENS)
    started, compacted_at, first, compaction, text = time.perf_counter(), None, None, None, ""
    async for item in model.astream_reply(request):
        if isinstance(item, Compaction):
            compaction, compacted_at = item, time.perf_counter()
        elif isinstance(item, ReplyChunk) and item.kind == "content":
            first = first or time.perf_counter()
            text += item.text
    first = first or time.perf_counter()
    return first - started, first - (compacted_at or started), compaction, text


async def long_chat(model: ChatModel, turns: int) -> dict:
    history = [{"role": "system", "content": SYSTEM}]
    compacted_turns, summary_seconds, plain, after_compaction, next_after = [], [], [], [], []
    for turn in range(turns):
        history.append({"role": "user", "content": user_message(turn)})
        total, from_compaction, compaction, text = await timed_turn(model, history)
        if compaction is not None:
            compacted_turns.append(turn)
            summary_seconds.append(compaction.seconds)
            after_compaction.append(from_compaction)
            history = list(compaction.messages)
        elif compacted_turns and compacted_turns[-1] == turn - 1:
            next_after.append(total)
        elif turn > 0:
            plain.append(total)
        history.append({"role": "assistant", "content": text or "ok"})
    between = [b - a for a, b in zip(compacted_turns, compacted_turns[1:])]
    base = statistics.median(plain) if plain else float("nan")

    def ratio(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s ({statistics.median(values) / base:.2f})" if values else "none"

    return {"context": model.context_length, "turns": turns, "compactions": len(compacted_turns),
            "turns to the first": compacted_turns[0] + 1 if compacted_turns else "none",
            "turns between": f"{statistics.median(between):.0f}" if between else "none",
            "summary written (s)": f"{statistics.median(summary_seconds):.1f}" if summary_seconds else "none",
            "other turns' first token (s)": f"{base:.2f}",
            "compacting turn, after its summary (ratio)": ratio(after_compaction),
            "the turn after it (ratio)": ratio(next_after)}


async def beside_a_compaction(model: ChatModel) -> list[dict]:
    """Another chat's first token while one chat's summary is written, against the same alone
    (the summary is background work, which llama.cpp pauses while another request has work):
    for a short question whose prompt the cache holds, and for a new message of about 300 tokens."""
    asked = iter(range(10**6))

    def short_question() -> str:
        return "Say hello."

    def new_message() -> str:
        return f"Message {next(asked)}: " + user_message(0) * 2

    async def first_token(message: str) -> float:
        started = time.perf_counter()
        request = ChatRequest.build([{"role": "user", "content": message}], temperature=0, max_new_tokens=4)
        async for item in model.astream_reply(request):
            if isinstance(item, ReplyChunk):
                return time.perf_counter() - started
        return time.perf_counter() - started

    others = {"a short question, cached": short_question, "a new message of 300 tokens": new_message}
    alone = {kind: statistics.median([await first_token(write()) for _ in range(3)]) for kind, write in others.items()}
    history = [{"role": "system", "content": SYSTEM}]
    while model.count_prompt_tokens(ChatRequest.build(history + [{"role": "user", "content": "x"}])) < 0.85 * (model.context_length - REPLY_TOKENS):
        history += [{"role": "user", "content": user_message(len(history))}, {"role": "assistant", "content": "Noted, keeper."}]
    history.append({"role": "user", "content": "What now?"})
    compacting = asyncio.ensure_future(timed_turn(model, history))
    while not model.engine.background_line.running and not compacting.done():
        await asyncio.sleep(0.02)
    during: dict[str, list[float]] = {kind: [] for kind in others}
    while not compacting.done() and len(during[next(reversed(others))]) < DURING_SAMPLES:
        for kind, write in others.items():
            await asyncio.sleep(0.3)  # into the summary's writing
            if not compacting.done():
                during[kind].append(await first_token(write()))
    await compacting
    return [{"context": model.context_length, "max_concurrent": model.model_args.max_concurrent or 1, "the other chat asks": kind,
             "its first token alone (s)": f"{alone[kind]:.2f}",
             "during a compaction (s)": f"{statistics.median(during[kind]):.2f}" if during[kind] else "none",
             "ratio": f"{statistics.median(during[kind]) / alone[kind]:.2f}" if during[kind] else "none"} for kind in others]


def table(rows: list[dict]) -> str:
    return markdown_table(list(rows[0]), [list(row.values()) for row in rows])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--max-concurrent", type=int, nargs="+", default=[1, 2], help="for another chat beside a compaction")
    args = parser.parse_args()
    chats, beside = [], []
    for context in args.contexts:
        with ChatModel({"infer_backend": "llamacpp", "max_model_len": context}) as model:
            chats.append(await long_chat(model, args.turns))
        for concurrent in args.max_concurrent:
            with ChatModel({"infer_backend": "llamacpp", "max_model_len": context, "max_concurrent": concurrent}) as model:
                beside += await beside_a_compaction(model)
    print("\nA long chat, compacted as it goes (first tokens: median; ratio to the other turns')\n")
    print(table(chats))
    print("\nAnother chat while one compacts\n")
    print(table(beside))


if __name__ == "__main__":
    asyncio.run(main())
