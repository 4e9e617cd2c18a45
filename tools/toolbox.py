"""Tools that run here when a reply calls them: what each is (its name, what it does, the JSON
schema of its arguments, whether it only reads) and how one call of it runs, checked, timed, and
turned into the result the model reads, which says what went wrong where something did: a tool
that fails is a result the model sees, never an error of the reply."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from engines.prompt.reply_parser import ToolCall

from .bounded_work import run_bounded


@dataclass(frozen=True)
class Tool:
    """``run`` takes the call's arguments, checked against ``parameters``, and gives its result
    as text, or raises what went wrong. ``read_only``: it changes nothing anywhere (it may run
    without asking)."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any]], Awaitable[str]]
    read_only: bool = True

    def asks_first(self, every_call: bool) -> bool:
        """Whether a call of it waits for the user's say: one that may change something always
        does, a read-only one where the user asks before ``every_call``."""
        return every_call or not self.read_only

    def schema(self) -> dict[str, Any]:
        """The tool as a chat template and OpenAI's ``tools`` list name it."""
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolResult:
    """What one call gave: ``content`` is what the model reads (for a failed call, why it
    failed); ``error`` says why it failed (None where it did not); ``seconds``: how long it ran."""

    call: ToolCall
    content: str
    error: str | None = None
    seconds: float = 0.0

    def for_template(self) -> dict[str, Any]:
        """The result as the tool message that follows the call in the conversation."""
        return {"role": "tool", "tool_call_id": self.call.id, "name": self.call.name, "content": self.content}


async def run_call(tool: Tool, call: ToolCall) -> ToolResult:
    """Run ``call`` of ``tool`` once its arguments fit the tool's schema."""
    started = time.perf_counter()
    try:
        arguments = await _arguments(tool, call)
        content = await tool.run(arguments)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # whatever a tool raises is its result: the model is told, and goes on
        why = str(error) or type(error).__name__
        return ToolResult(call, f"Error: {why}", why, time.perf_counter() - started)
    return ToolResult(call, content, None, time.perf_counter() - started)


async def _arguments(tool: Tool, call: ToolCall) -> dict[str, Any]:
    """The call's arguments once they fit the tool's schema; else a ValueError that says where they
    do not. The check runs in a bounded child: an MCP server's schema may hold a pattern that
    backtracks (``^(a|a)*$`` takes seconds on 26 characters, twice as long for each one more)."""
    import jsonschema  # noqa: F401 (imported here: an import in a fork may wait forever on a lock another thread held)

    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as error:
        raise ValueError(f"the arguments are not JSON ({error.msg}): {call.arguments[:200]!r}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"the arguments must be a JSON object of the tool's parameters, not {call.arguments[:200]!r}")
    await run_bounded(_check_arguments, tool.name, tool.parameters, arguments,
                      what=f"checking the arguments against the patterns and rules of {tool.name}'s parameters")
    return arguments


def _check_arguments(name: str, parameters: dict[str, Any], arguments: dict[str, Any]) -> str:
    """Nothing where ``arguments`` fit ``parameters``; else a ValueError that says where they do not."""
    import jsonschema

    problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(parameters).iter_errors(arguments))
    if problem is not None:
        where = "/".join(str(part) for part in problem.absolute_path) or "the arguments"
        raise ValueError(f"the arguments do not fit {name}'s parameters: {where}: {problem.message}")
    return ""
