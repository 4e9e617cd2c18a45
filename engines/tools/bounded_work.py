"""A tool's work run in a child process bounded in CPU time and memory, awaited without holding
the event loop, and ended with the call.

The loop that runs a tool call serves every page event and every ``/v1`` request, so work done on
it (a calculation, a check of the arguments against a schema whose pattern backtracks) holds every
other user until it ends, and Stop cannot end it. Here it runs in a child that lowers its own
limits first, as reply formats are compiled (engines/backends/grammar_sandbox.py, whose comments
say why a fork and why text is all that comes back): past its CPU time the kernel stops it, past
its memory its allocations fail, and the call is refused saying so. The loop only waits on the
child's pipe, and a call cancelled (Stop, a client gone) kills the child at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import multiprocessing
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# What a tool's own work needs is microseconds to milliseconds; a second or two is room for a busy
# machine, not for work that would hold a core for minutes.
WORK_SECONDS = 2
WORK_MEMORY = 256 * 2**20
# Wall-clock time beyond the CPU time, for a machine busy with other work.
WALL_SLACK_SECONDS = 10
_ANSWER, _REFUSAL = b"A", b"R"
PR_SET_DUMPABLE = 4  # from <linux/prctl.h>


@dataclass(frozen=True)
class WorkLimits:
    seconds: int = WORK_SECONDS
    memory: int = WORK_MEMORY


class WorkRefused(ValueError):
    """The work raised this (its message), or went past its limits."""


async def run_bounded(job: Callable[..., str], *args: Any, what: str, limits: WorkLimits = WorkLimits()) -> str:
    """``job(*args)``, a text, computed in a child process within ``limits``. What ``job`` raises
    comes back as a WorkRefused with its message; a child past the limits is refused naming ``what``."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_run, args=(writer, job, args, limits), daemon=True)
    child.start()
    writer.close()
    loop = asyncio.get_running_loop()
    readable = loop.create_future()
    loop.add_reader(reader.fileno(), lambda: readable.done() or readable.set_result(None))
    try:
        async with asyncio.timeout(limits.seconds + WALL_SLACK_SECONDS):
            await readable
        answer = reader.recv_bytes()
    except (TimeoutError, EOFError):  # stopped by the kernel, out of memory, or stuck
        answer = b""
    finally:
        loop.remove_reader(reader.fileno())
        child.kill()
        child.join()
        reader.close()
    kind, text = answer[:1], answer[1:].decode()
    if kind == _ANSWER:
        return text
    if kind == _REFUSAL:
        raise WorkRefused(text)
    raise WorkRefused(f"{what} took more than this server gives a tool's work ({limits.seconds} s of CPU time, "
                      f"{limits.memory / 2**20:,.0f} MB of memory), so it was stopped")


def _run(writer: Any, job: Callable[..., str], args: tuple[Any, ...], limits: WorkLimits) -> None:
    """The child: lower its own limits, run ``job``, send its text or why it failed."""
    # Stopped by SIGXCPU, the child would dump its memory, which is the server's, to a core file.
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0)
    resource.setrlimit(resource.RLIMIT_CPU, (limits.seconds, limits.seconds + 5))
    # Counted from what the child starts with: the server's own data, shared until written.
    resource.setrlimit(resource.RLIMIT_DATA, (_data_size() + limits.memory,) * 2)
    try:
        answer = _ANSWER + job(*args).encode(errors="backslashreplace")
    except MemoryError:
        return
    except Exception as error:  # whatever the job raises is why the call failed: the model is told
        answer = _REFUSAL + (str(error) or type(error).__name__).encode(errors="backslashreplace")
    writer.send_bytes(answer)


def _data_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmData line")
