"""The child process reply formats are compiled in (engines/backends/grammar_sandbox.py): what
comes back, and that work past its CPU time or its memory is stopped there, refused in words,
while this process's memory stays where it was. The compilers themselves run through it in the
backends' structured-output tests, and a schema too costly for xgrammar against a running server
in tests/test_security_line.py."""

from __future__ import annotations

import ctypes
import itertools
import re
import time

import psutil
import pytest

from engines import ConfigError
from engines.backends.grammar_sandbox import CompileLimits, compile_bounded

LIMITS = CompileLimits(seconds=2, memory=256 * 2**20)
PR_GET_DUMPABLE = 3  # from <linux/prctl.h>
TOO_COSTLY = "takes more than this server gives one reply format to compile (2 s of CPU time, 256 MB of memory)"


def spin() -> str:
    for _ in itertools.count():
        pass
    return ""


def allocate(size: int) -> str:
    return str(len(bytearray(size)))


def dumpable() -> str:
    return str(ctypes.CDLL(None).prctl(PR_GET_DUMPABLE))


def refuse(why: str) -> str:
    raise ConfigError(why)


def test_the_jobs_text_comes_back():
    assert compile_bounded(allocate, 10 * 2**20, what="x", limits=LIMITS) == str(10 * 2**20)


def test_the_jobs_own_refusal_comes_back_as_it_was_said():
    with pytest.raises(ConfigError, match="^schema.pattern: no lookaheads$"):
        compile_bounded(refuse, "schema.pattern: no lookaheads", what="x", limits=LIMITS)


def test_work_past_its_cpu_time_is_stopped():
    started = time.monotonic()
    with pytest.raises(ConfigError, match="^" + re.escape(f"The reply schema {TOO_COSTLY}. Make it smaller")):
        compile_bounded(spin, what="The reply schema", limits=LIMITS)
    assert time.monotonic() - started < LIMITS.seconds + 10


def test_work_past_its_memory_is_stopped_and_this_process_keeps_its_own():
    before = psutil.Process().memory_info().rss
    with pytest.raises(ConfigError, match=re.escape(TOO_COSTLY)):
        compile_bounded(allocate, 4 * 2**30, what="The reply schema", limits=LIMITS)
    assert psutil.Process().memory_info().rss - before < 50 * 2**20
    assert compile_bounded(allocate, 100 * 2**20, what="x", limits=LIMITS) == str(100 * 2**20)



def test_the_child_leaves_no_core_dump_of_the_servers_memory():
    assert dumpable() == "1"
    assert compile_bounded(dumpable, what="x", limits=LIMITS) == "0"
