"""Reply formats compiled in a child process, bounded in CPU time and memory (engines/bounded_child.py).

The door (reply_format.check_schema) bounds each part of a schema and its patterns together, but
not everything a compiler makes of the parts: xgrammar takes about a second for a string with a
maxLength of 1,000, and a schema holds dozens of them. So each compile runs in a bounded child, and
a compile past COMPILE_SECONDS of CPU time or COMPILE_MEMORY is refused with a ConfigError saying
what to change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..bounded_child import ChildLimits, JobRefused, OverLimits, run_in_child
from ..errors import ConfigError

# Ordinary schemas compile in about a second on a 2-core machine (a string with a maxLength is the
# slow part); ten seconds of CPU time leave room for large ones, not for minutes of work.
COMPILE_SECONDS = 10
COMPILE_MEMORY = 2**30


@dataclass(frozen=True)
class CompileLimits(ChildLimits):
    seconds: int = COMPILE_SECONDS
    memory: int = COMPILE_MEMORY
    slack_seconds: int = 30


def compile_bounded(job: Callable[..., str], *args: Any, what: str, limits: CompileLimits = CompileLimits()) -> str:
    """``job(*args)``, a text, computed in a child process within ``limits``. A ConfigError that
    ``job`` raises comes back as one; a child that goes past the limits is refused naming ``what``."""
    try:
        return run_in_child(job, args, limits, refusals=(ConfigError,))
    except JobRefused as refusal:
        raise ConfigError(str(refusal)) from None
    except OverLimits:
        raise ConfigError(
            f"{what} takes more than this server gives one reply format to compile ({limits.seconds} s of CPU time, "
            f"{limits.memory / 2**20:,.0f} MB of memory). Make it smaller: fewer or shorter patterns and maxLength bounds, fewer optional properties."
        ) from None
