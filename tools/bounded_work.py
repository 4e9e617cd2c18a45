"""A tool's work run in a child process bounded in CPU time and memory (engines/bounded_child.py),
awaited without holding the event loop, and ended with the call.

The loop that runs a tool call serves every page event and every ``/v1`` request, so work done on
it (a calculation, a check of the arguments against a schema whose pattern backtracks) holds every
other user until it ends, and Stop cannot end it. In a bounded child, work past its limits is
refused saying so, and a call cancelled (Stop, a client gone) kills the child at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.bounded_child import ChildLimits, JobRefused, OverLimits, arun_in_child

# What a tool's own work needs is microseconds to milliseconds; a second or two is room for a busy
# machine, not for work that would hold a core for minutes.
WORK_SECONDS = 2
WORK_MEMORY = 256 * 2**20


@dataclass(frozen=True)
class WorkLimits(ChildLimits):
    seconds: int = WORK_SECONDS
    memory: int = WORK_MEMORY
    slack_seconds: int = 10


class WorkRefused(ValueError):
    """The work raised this (its message), or went past its limits."""


async def run_bounded(job: Callable[..., str], *args: Any, what: str, limits: WorkLimits = WorkLimits()) -> str:
    """``job(*args)``, a text, computed in a child process within ``limits``. What ``job`` raises
    comes back as a WorkRefused with its message (the model is told why its call failed); a child
    past the limits is refused naming ``what``."""
    try:
        return await arun_in_child(job, args, limits, refusals=(Exception,))
    except JobRefused as refusal:
        raise WorkRefused(str(refusal)) from None
    except OverLimits:
        raise WorkRefused(f"{what} took more than this server gives a tool's work ({limits.seconds} s of CPU time, "
                          f"{limits.memory / 2**20:,.0f} MB of memory), so it was stopped") from None
