"""What a full run (``bash scripts/test.sh``, CI) holds to: a pytest hook, and a check of each
test's report, that conftest.py takes in.

A skip hides whatever it stands in front of: a missing Chromium, vLLM or llama.cpp once turned
dozens of tests into skips and the run stayed green. So where ``ANYCHAT_STRICT_SKIPS=1`` (set by
scripts/test.sh), a skip is a failure unless it says the test needs hardware this machine lacks.
"""

from __future__ import annotations

import os
import re

import pytest

STRICT = os.environ.get("ANYCHAT_STRICT_SKIPS") == "1"
# The only skips a strict run takes: the test needs a GPU (SGLang, KTransformers), or checks what
# happens without one on a machine that has one.
HARDWARE_SKIP = re.compile(r"\bGPU\b")


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module skipped whole at import (``importorskip``) fails a strict run the same way."""
    refuse_skip(report)


def refuse_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not STRICT or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if not HARDWARE_SKIP.search(reason):
        report.outcome = "failed"
        report.longrepr = (f"{reason}\nA full run (scripts/test.sh, CI) takes no skip but for missing hardware: install what "
                           "the reason names (bash scripts/setup.sh --test), or run pytest directly to allow skips.")
