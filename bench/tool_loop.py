"""What the agent loop adds to a step: from the model's finished call to the tool starting, and from
the tool's result to the model's next token, against the tool's own time and against the same
next request sent to the model directly, on llama.cpp and the embedded model.

    OMP_WAIT_POLICY=PASSIVE python bench/tool_loop.py [--rounds 5] [--tool-ms 100]

Each round asks a new question whose first answer is a forced call of a tool that sleeps
``--tool-ms``; the loop runs it and the model answers again. Then the second answer's request (the
question, the call, its result) is sent to the model directly, and its time to first token taken.
The loop's own time in a step is the call-to-start time plus the result-to-next-token time less
that direct time to first token (the model reading the longer prompt is the model's, not the
loop's). Figures are medians.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engines import ChatModel, ChatRequest, ReplyChunk, Response  # noqa: E402
from harness.markdown_table import markdown_table  # noqa: E402
from tools import Tool, ToolResult, reply_with_tools  # noqa: E402

PARAMETERS = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                               "b": {"type": "integer", "minimum": 0, "maximum": 999}},
              "required": ["a", "b"], "additionalProperties": False}


async def one_round(model: ChatModel, round_number: int, tool_seconds: float, tokens: int) -> dict[str, float]:
    marks: dict[str, float] = {}

    async def multiply(arguments: dict) -> str:
        marks["tool started"] = time.perf_counter()
        await asyncio.sleep(tool_seconds)
        marks["tool ended"] = time.perf_counter()
        return str(arguments["a"] * arguments["b"])

    tool = Tool("multiply", "Multiply two whole numbers.", PARAMETERS, multiply)
    question = [{"role": "user", "content": f"(Question {round_number}.) What is {round_number + 16} times 23?"}]
    request = ChatRequest.build(question, tools=[tool.schema()], tool_choice={"type": "function", "function": {"name": "multiply"}},
                                temperature=0, max_new_tokens=tokens)
    first_answer, result = None, None
    async for item in reply_with_tools(model, request, {"multiply": tool}, step_limit=2):
        if isinstance(item, Response) and first_answer is None:
            first_answer, marks["call"] = item, time.perf_counter()
        elif isinstance(item, ToolResult):
            result = item
        elif isinstance(item, ReplyChunk) and result is not None and "next token" not in marks:
            marks["next token"] = time.perf_counter()
    answer = {"role": "assistant", "content": first_answer.parts.content or "", "tool_calls": [result.call.for_template()]}
    direct = dataclasses.replace(request, messages=[*question, answer, result.for_template()], reply_format=None)
    started = time.perf_counter()
    async for item in model.astream_reply(direct):
        if isinstance(item, ReplyChunk):
            direct_first = time.perf_counter() - started
            break
    return {
        "call to tool start": marks["tool started"] - marks["call"],
        "tool's own time": marks["tool ended"] - marks["tool started"],
        "result to next token": marks["next token"] - marks["tool ended"],
        "direct time to first token": direct_first,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tool-ms", type=float, default=100)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    with ChatModel({"infer_backend": "llamacpp"}) as model:
        asyncio.run(one_round(model, 0, args.tool_ms / 1000, args.tokens))  # warm-up
        rounds = [asyncio.run(one_round(model, number, args.tool_ms / 1000, args.tokens)) for number in range(1, args.rounds + 1)]
    figures = {name: statistics.median(round_[name] for round_ in rounds) * 1000 for name in rounds[0]}
    own = statistics.median((r["call to tool start"] + r["result to next token"] - r["direct time to first token"]) * 1000 for r in rounds)
    print(f"\nllama.cpp, embedded model, a tool of {args.tool_ms:g} ms, median of {args.rounds} rounds\n")
    print(markdown_table(["figure", "ms"], [*[(name, f"{value:.1f}") for name, value in figures.items()],
                                             ("the loop's own time per step", f"{own:.1f}")]))
    print(json.dumps({"loop_own_ms": own, **figures}))


if __name__ == "__main__":
    main()
