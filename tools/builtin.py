"""The tools that come with the app and need no server: a calculator, the current date and time,
and Python, which runs in the page's browser (the page gives each reply its own: chat/browser_python.py)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .bounded_work import run_bounded
from .calculator import LONGEST_EXPRESSION, calculate
from .toolbox import Tool


async def _calculator(arguments: dict[str, Any]) -> str:
    import simpleeval  # noqa: F401 (imported here: an import in a fork may wait forever on a lock another thread held)

    expression = arguments["expression"]
    return await run_bounded(calculate, expression, what=f"the calculation {expression[:100]!r}")


async def _current_time(arguments: dict[str, Any]) -> str:
    zone_name = arguments.get("timezone") or ""
    try:
        # A zone's file is read from disk the first time it is named.
        zone = await asyncio.to_thread(ZoneInfo, zone_name) if zone_name else None
    # OSError: a name of a folder of zones, like Europe, whose message has the server's path.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"{zone_name!r} is not a time zone this server knows: name one as the IANA database does, "
                         "like Europe/Paris or America/New_York, or leave it out for the server's own") from None
    now = datetime.datetime.now(zone) if zone else datetime.datetime.now().astimezone()
    return f"{now:%A %d %B %Y, %H:%M:%S} ({now.tzname()}, UTC{now:%z}); ISO 8601: {now.isoformat(timespec='seconds')}"


async def _python_elsewhere(arguments: dict[str, Any]) -> str:
    raise RuntimeError("Python runs in the page's browser, and this chat has none (the terminal chat cannot run it)")


CALCULATOR = Tool(
    name="calculator",
    description="Evaluate an arithmetic expression exactly: numbers, + - * / // % **, parentheses, pi and e, and functions such "
                "as sqrt, log, sin, round, min and max. Use it for any arithmetic rather than working it out.",
    parameters={"type": "object", "properties": {"expression": {"type": "string", "minLength": 1, "maxLength": LONGEST_EXPRESSION,
                                                                "description": "the expression, like (3 + 4.5) * sqrt(2)"}},
                "required": ["expression"], "additionalProperties": False},
    run=_calculator,
)
CURRENT_TIME = Tool(
    name="current_time",
    description="The current date, weekday and time, in the server's time zone or the one named.",
    parameters={"type": "object", "properties": {"timezone": {"type": "string", "description": "an IANA time zone, like Europe/Paris"}},
                "additionalProperties": False},
    run=_current_time,
)
PYTHON = Tool(
    name="python",
    description="Run Python code (the standard library only) in the user's browser, and get what it printed. Print what you "
                "want to read.",
    parameters={"type": "object", "properties": {"code": {"type": "string", "minLength": 1, "description": "the program, like print(2**10)"}},
                "required": ["code"], "additionalProperties": False},
    run=_python_elsewhere,
)
BUILTIN_TOOLS = {tool.name: tool for tool in (CALCULATOR, CURRENT_TIME, PYTHON)}
