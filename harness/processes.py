"""Stopping a process a test or benchmark started, whatever state it is in."""

from __future__ import annotations

import subprocess


def stop_process(process: subprocess.Popen, seconds: float) -> None:
    """Ask ``process`` to end, and kill it if it has not within ``seconds``; waits for it either way."""
    process.terminate()
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
