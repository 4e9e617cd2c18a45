"""The cores the rest of the machine leaves free, measured as it runs, for runtimes whose threads
must not share a core with another busy process.

ggml's threads wait for each other at each barrier of a step by spinning, so a thread that another
busy process holds up stalls all the others while they spin: on 2 cores beside one busy process,
4 chats decoded together on 2 threads made 42 tok/s in all, fewer than one chat alone on 1 thread
(70; bench/llamacpp_batch.py). Counted again every half second from the kernel's CPU accounting:
the whole machine's busy time less this process's own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

# Seconds behind each count: long enough for the kernel's accounting (in ticks of 10 ms), short
# enough to follow a process that starts or stops.
WINDOW = 0.5
# A core counts as free when the other processes left at least this share of it: a thread on a
# core that is busy a quarter of the time already stalls its step often.
FREE_SHARE = 0.75


@dataclass(frozen=True)
class _Sample:
    at: float
    machine_busy: float
    ours: float


class FreeCores:
    """``count()``: how many of at most ``most`` threads would each have a core of their own, from
    what the other processes used over the last window (``most`` until a window has passed)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._cores = psutil.cpu_count() or 1
        self._process = psutil.Process()
        self._since = self._sample()
        self._count = most

    def count(self) -> int:
        now = time.monotonic()
        if now - self._since.at < WINDOW:
            return self._count
        sample = self._sample()
        others = max(0.0, (sample.machine_busy - self._since.machine_busy) - (sample.ours - self._since.ours)) / (sample.at - self._since.at)
        self._count = max(1, min(self.most, int(self._cores - others + 1 - FREE_SHARE)))
        self._since = sample
        return self._count

    def _sample(self) -> _Sample:
        machine = psutil.cpu_times()
        # Guest time is counted in user and nice already; waiting on a disk leaves the core free.
        not_busy = sum(getattr(machine, name, 0.0) for name in ("idle", "iowait", "guest", "guest_nice"))
        ours = self._process.cpu_times()
        return _Sample(time.monotonic(), sum(machine) - not_busy, ours.user + ours.system)
