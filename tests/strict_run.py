"""What a full run (``bash scripts/test.sh``, CI) holds to, as pytest hooks that conftest.py takes in.

A skip hides whatever it stands in front of: a missing Chromium, vLLM or llama.cpp once turned
dozens of tests into skips and the run stayed green. So where ``ANYCHAT_STRICT_SKIPS=1`` (set by
scripts/test.sh), a skip is a failure unless it says the test needs hardware this machine lacks.

Video tests need torchvision, which has no build beside the CPU torch of .venv: where it is
missing they are left out of the run (not skipped), and scripts/test.sh runs them in .venv-video.
"""

from __future__ import annotations

import importlib.util
import os
import re

import pytest

STRICT = os.environ.get("ANYCHAT_STRICT_SKIPS") == "1"
HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None
# The only skips a strict run takes: the test needs a GPU (SGLang, KTransformers), or checks what
# happens without one on a machine that has one.
HARDWARE_SKIP = re.compile(r"\bGPU\b")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "video: needs torchvision (transformers' video processors, vLLM's image and video "
                                       "models); where it is missing, left out here and run in .venv-video (scripts/test.sh)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_TORCHVISION:
        return
    video = [item for item in items if item.get_closest_marker("video")]
    if video:
        config.hook.pytest_deselected(items=video)
        items[:] = [item for item in items if not item.get_closest_marker("video")]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    refuse_skip(outcome.get_result())


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
