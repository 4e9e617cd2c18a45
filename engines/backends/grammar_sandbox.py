"""Reply formats compiled in a child process, bounded in CPU time and memory.

The door (reply_format.check_schema) bounds each part of a schema and its patterns together, but
not everything a compiler makes of the parts: xgrammar takes about a second for a string with a
maxLength of 1,000, and a schema holds dozens of them. So each compile runs in a child that lowers
its own limits first: past COMPILE_SECONDS of CPU time the kernel stops it, past COMPILE_MEMORY
its allocations fail, and the request is refused with a ConfigError saying what to change. The
compile's peak memory is the child's, never the server's.

The child is a fork of the server: it has the compilers and the request in memory already, so a
compile costs a fork (milliseconds), not an interpreter's start and xgrammar's import (seconds,
torch and transformers with it). Forking a process that runs threads is safe here because the child
touches nothing those threads hold: it runs the converter on its own copy of the schema, with
threads of its own, and exits. (A fork server would re-run an unguarded main module, such as a
script using ChatModel, in each child.) The answer comes back as text (the compiled grammar, or the
error's message), never as a pickled object: a child that a hostile schema took over could
otherwise hand the server an object to run.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

# Ordinary schemas compile in about a second on a 2-core machine (a string with a maxLength is the
# slow part); ten seconds of CPU time leave room for large ones, not for minutes of work.
COMPILE_SECONDS = 10
COMPILE_MEMORY = 2**30
# Wall-clock time beyond the CPU time, for a machine busy with other work.
WALL_SLACK_SECONDS = 30
_ANSWER, _REFUSAL = b"A", b"R"
PR_SET_DUMPABLE = 4  # from <linux/prctl.h>


@dataclass(frozen=True)
class CompileLimits:
    seconds: int = COMPILE_SECONDS
    memory: int = COMPILE_MEMORY


def compile_bounded(job: Callable[..., str], *args: Any, what: str, limits: CompileLimits = CompileLimits()) -> str:
    """``job(*args)``, a text, computed in a child process within ``limits``. A ConfigError that
    ``job`` raises comes back as one; a child that goes past the limits is refused naming ``what``."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_run, args=(writer, job, args, limits), daemon=True)
    child.start()
    writer.close()
    try:
        answer = reader.recv_bytes() if reader.poll(limits.seconds + WALL_SLACK_SECONDS) else b""
    except EOFError:  # stopped by the kernel, or its memory ran out
        answer = b""
    finally:
        child.kill()
        child.join()
        reader.close()
    kind, text = answer[:1], answer[1:].decode()
    if kind == _ANSWER:
        return text
    if kind == _REFUSAL:
        raise ConfigError(text)
    raise ConfigError(
        f"{what} takes more than this server gives one reply format to compile ({limits.seconds} s of CPU time, "
        f"{limits.memory / 2**20:,.0f} MB of memory). Make it smaller: fewer or shorter patterns and maxLength bounds, fewer optional properties."
    )


def _run(writer: Any, job: Callable[..., str], args: tuple[Any, ...], limits: CompileLimits) -> None:
    """The child: lower its own limits, run ``job``, send its text or its refusal."""
    # The kernel stops the child with SIGXCPU, and a C++ allocation failure aborts it: either would
    # dump its memory, which is the server's (other users' chats among it), to a core file.
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0)
    resource.setrlimit(resource.RLIMIT_CPU, (limits.seconds, limits.seconds + 5))
    # Counted from what the child starts with: the server's own data, shared until written.
    resource.setrlimit(resource.RLIMIT_DATA, (_data_size() + limits.memory,) * 2)
    try:
        answer = _ANSWER + job(*args).encode()
    except ConfigError as error:
        answer = _REFUSAL + str(error).encode()
    except MemoryError:
        return
    writer.send_bytes(answer)


def _data_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmData line")
