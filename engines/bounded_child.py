"""Work that may run away (a reply format's compile, a tool's calculation or argument check) run in
a child process bounded in CPU time and memory, waited for in a thread or on the event loop.

The child lowers its own limits first: past its CPU time the kernel stops it, past its memory its
allocations fail, and the caller refuses the request saying so. The work's peak memory is the
child's, never the server's.

The child is a fork of the server: it has the libraries and the request in memory already, so the
work costs a fork (milliseconds, more for a server holding gigabytes, so it is done off the event loop), not an interpreter's start and the imports (seconds, torch and
transformers with them). Forking a process that runs threads is safe here because the child touches
nothing those threads hold: it runs the job on its own copy of the arguments, with threads of its
own, and exits (its callers import what the job needs before, since an import in the child could
wait on a lock another thread held). (A fork server would re-run an unguarded main module, such as
a script using ChatModel, in each child.) The answer comes back as text (the job's, or the message
of what it raised), never as a pickled object: a child that hostile input took over could otherwise
hand the server an object to run.
"""

from __future__ import annotations

import asyncio
import ctypes
import multiprocessing
import resource
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ANSWER, _REFUSAL = b"A", b"R"
PR_SET_DUMPABLE = 4  # from <linux/prctl.h>
# A fork holds the interpreter while the kernel copies the server's page tables (75 ms for 3 GB):
# one at a time, so that the event loop runs between two of them.
_FORKING = threading.Lock()


@dataclass(frozen=True)
class ChildLimits:
    seconds: int
    memory: int
    # Wall-clock time beyond the CPU time, for a machine busy with other work.
    slack_seconds: int


class JobRefused(Exception):
    """The job raised one of the exceptions its caller refuses with; this carries its message."""


class OverLimits(Exception):
    """The child went past its limits (or got stuck) and was stopped."""


def run_in_child(job: Callable[..., str], args: tuple[Any, ...], limits: ChildLimits,
                 refusals: tuple[type[BaseException], ...]) -> str:
    """``job(*args)``, a text, computed in a child within ``limits``, waited for in this thread."""
    child, reader = _started(job, args, limits, refusals)
    try:
        answer = reader.recv_bytes() if reader.poll(limits.seconds + limits.slack_seconds) else b""
    except EOFError:  # stopped by the kernel, or its memory ran out
        answer = b""
    finally:
        _ended(child, reader)
    return _outcome(answer)


async def arun_in_child(job: Callable[..., str], args: tuple[Any, ...], limits: ChildLimits,
                        refusals: tuple[type[BaseException], ...]) -> str:
    """The same, awaited on the event loop without holding it; cancelling it kills the child.
    The fork and the reaping run in a thread: both copy or free the server's page tables, which
    takes a second for sixteen children of a server holding 3 GB."""
    loop = asyncio.get_running_loop()
    starting = loop.run_in_executor(None, _started, job, args, limits, refusals)
    try:
        child, reader = await asyncio.shield(starting)
    except asyncio.CancelledError:
        starting.add_done_callback(lambda started: started.exception() or loop.run_in_executor(None, _ended, *started.result()))
        raise
    readable = loop.create_future()
    loop.add_reader(reader.fileno(), lambda: readable.done() or readable.set_result(None))
    try:
        async with asyncio.timeout(limits.seconds + limits.slack_seconds):
            await readable
        answer = reader.recv_bytes()
    except (TimeoutError, EOFError):  # stopped by the kernel, out of memory, or stuck
        answer = b""
    finally:
        loop.remove_reader(reader.fileno())
        child.kill()
        loop.run_in_executor(None, _reaped, child, reader)
    return _outcome(answer)


def _started(job: Callable[..., str], args: tuple[Any, ...], limits: ChildLimits, refusals: tuple[type[BaseException], ...]):
    with _FORKING:
        return _forked(job, args, limits, refusals)


def _forked(job: Callable[..., str], args: tuple[Any, ...], limits: ChildLimits, refusals: tuple[type[BaseException], ...]):
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_run, args=(writer, job, args, limits, refusals), daemon=True)
    child.start()
    writer.close()
    return child, reader


def _ended(child: Any, reader: Any) -> None:
    child.kill()
    _reaped(child, reader)


def _reaped(child: Any, reader: Any) -> None:
    """Waits while the kernel frees the child's copy of the server's page tables."""
    child.join()
    reader.close()


def _outcome(answer: bytes) -> str:
    kind, text = answer[:1], answer[1:].decode()
    if kind == _ANSWER:
        return text
    if kind == _REFUSAL:
        raise JobRefused(text)
    raise OverLimits


def _run(writer: Any, job: Callable[..., str], args: tuple[Any, ...], limits: ChildLimits,
         refusals: tuple[type[BaseException], ...]) -> None:
    """The child: lower its own limits, run ``job``, send its text or why it failed."""
    # The kernel stops the child with SIGXCPU, and a C++ allocation failure aborts it: either would
    # dump its memory, which is the server's (other users' chats among it), to a core file.
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0)
    resource.setrlimit(resource.RLIMIT_CPU, (limits.seconds, limits.seconds + 5))
    # Counted from what the child starts with: the server's own data, shared until written.
    resource.setrlimit(resource.RLIMIT_DATA, (_data_size() + limits.memory,) * 2)
    try:
        answer = _ANSWER + job(*args).encode(errors="backslashreplace")
    except MemoryError:
        return
    except refusals as error:
        answer = _REFUSAL + (str(error) or type(error).__name__).encode(errors="backslashreplace")
    writer.send_bytes(answer)


def _data_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmData line")
