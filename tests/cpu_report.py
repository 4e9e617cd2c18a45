"""``--cpu-report N``: the N modules and the N tests that used the most CPU time, and the run's total.

Wall-clock durations (``--durations``) mislead where the suite keeps the machine busy: a test run
beside a heavy one takes longer without costing more. CPU seconds add up to the suite's time on a
busy machine, so they say where to cut. A module's CPU is counted over the process tree of the
pytest process that ran it: the model in that process, the apps, Chromium, vLLM's engine processes
and the benchmark runs it started. The tree is read as each test starts, so a
module's count holds the CPU of everything its tests and fixtures did (a session fixture's start
in the first module that uses it) until the next module's first test began; a test's, likewise,
until the next test began (so a module fixture's start counts in the module's first test, its end
in the module's last). With xdist, the workers count; the
controller's own start (its imports) is left out. A process whose parent exits before it does is
counted only up to the last reading before that (a process reaped by a parent in the tree is
counted whole, in its parent's count).
"""

from __future__ import annotations

import json
import os
from collections import Counter

import psutil
import pytest

OUTPUT_KEY = "cpu_seconds_by_module"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", type=int, default=0, metavar="N",
                     help="print the N modules and the N tests that used the most CPU time, counted over each worker's process tree")


class ProcessTreeClock:
    """CPU seconds used by this process and its descendants so far, dead ones included.

    A process's count holds the children it reaped (their whole time lands there at the wait), so
    a process that is gone is dropped where its parent is still in the tree (it was reaped there)
    and kept at its last count where its parent is gone too (init reaped it; what it used after
    the last sample is lost)."""

    def __init__(self) -> None:
        self.root = psutil.Process()
        self.seen: dict[int, tuple[float, int]] = {}  # pid: its last count, its parent's pid
        self.kept = 0.0

    def read(self) -> float:
        live = {}
        for process in [self.root, *self.root.children(recursive=True)]:
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    live[process.pid] = (times.user + times.system + times.children_user + times.children_system, process.ppid())
            except psutil.Error:
                continue
        for pid, (count, parent) in self.seen.items():
            if pid not in live and parent not in live:
                self.kept += count
        self.seen = live
        return self.kept + sum(count for count, _ in live.values())


class CpuByTest:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.clock = ProcessTreeClock()
        self.seconds: Counter[str] = Counter()
        self.test: str | None = "(before the first test: imports and collection)"
        self.since = 0.0

    def switch_to(self, test: str | None) -> None:
        now = self.clock.read()
        if self.test is not None:
            self.seconds[self.test] += now - self.since
        self.test, self.since = test, now

    def runs_tests(self) -> bool:
        """False in xdist's controller: it is told of each test a worker starts, and the workers count."""
        return not self.config.pluginmanager.has_plugin("dsession")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if self.runs_tests():
            self.switch_to(nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.runs_tests():
            return
        self.switch_to(None)
        if hasattr(self.config, "workeroutput"):  # an xdist worker hands its counts to the controller
            self.config.workeroutput[OUTPUT_KEY] = json.dumps(self.seconds)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        self.seconds.update(json.loads(getattr(node, "workeroutput", {}).get(OUTPUT_KEY, "{}")))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if hasattr(self.config, "workeroutput"):
            return
        shown = self.config.getoption("cpu_report")
        by_module: Counter[str] = Counter()
        for test, seconds in self.seconds.items():
            by_module[test.split("::", 1)[0]] += seconds
        for what, counts in (("module", by_module), ("test", self.seconds)):
            ranked = counts.most_common(shown)
            terminalreporter.write_sep("=", f"CPU seconds by {what}, the {len(ranked)} highest "
                                            f"(all: {counts.total():.0f} s on {os.cpu_count()} cores)")
            for name, seconds in ranked:
                terminalreporter.write_line(f"{seconds:8.1f} s  {name}")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("cpu_report") > 0:
        config.pluginmanager.register(CpuByTest(config), "cpu_report")
