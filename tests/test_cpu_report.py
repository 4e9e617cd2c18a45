"""The CPU report's clock (tests/cpu_report.py): a child's CPU counts once, whether it was seen
running, reaped, or both. Each case runs in a fresh interpreter, so that no thread or process this
test's worker holds (a model, an engine) is counted beside the child's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP = """
import subprocess, sys, time
from tests.cpu_report import ProcessTreeClock
BURN = "import time\\nwhile time.process_time() < {seconds}: pass"
clock = ProcessTreeClock()
before = clock.read()
"""


def used(case: str) -> float:
    """The CPU seconds the clock counted over ``case``, run after SETUP in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", SETUP + case + "\nprint(clock.read() - before)"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def test_a_child_seen_running_and_then_reaped_counts_once():
    seconds = used("""
child = subprocess.Popen([sys.executable, "-c", BURN.format(seconds=1.0)])
while clock.read() - before < 0.6:  # seen running, most of its work done
    assert child.poll() is None, "the child's CPU was not seen while it ran"
    time.sleep(0.05)
child.wait()
""")
    # Its second of work (less what the clock's ticks round off), its interpreter's start and the
    # polling; counted twice (as seen running, then again among the reaped children) it would be
    # 1.6 s or more.
    assert 0.95 <= seconds < 1.5, seconds


def test_a_child_reaped_between_two_readings_counts():
    seconds = used('subprocess.run([sys.executable, "-c", BURN.format(seconds=0.5)], check=True)')
    assert 0.45 <= seconds < 1.0, seconds
