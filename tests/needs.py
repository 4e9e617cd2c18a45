"""What a test needs beyond the model in this process, as markers a run can select on.

- ``video``: torchvision (transformers' video processors, vLLM's image and video models). It has no
  build beside the CPU torch of .venv, so where it is missing these tests are left out of the run
  (not skipped), and ``scripts/test.sh`` runs them in .venv-video.
- ``browser``: Chromium. ``vllm``: a vLLM engine. ``server``: the app served, as ``python app.py``
  or in this process. ``slow``: about 5 s or more on its own, most of it the model's work.
  ``scripts/test.sh --quick`` leaves these four out.

A test gets ``browser`` or ``server`` from the fixtures it uses; a module or test that starts one
itself says so with ``pytestmark`` or the marker.
"""

from __future__ import annotations

import importlib.util

import pytest

from workers import slowest_first

MARKERS = {
    "video": "needs torchvision; where it is missing, left out here and run in .venv-video (scripts/test.sh)",
    "browser": "drives Chromium (left out by scripts/test.sh --quick)",
    "vllm": "starts a vLLM engine (left out by scripts/test.sh --quick)",
    "server": "serves the app, as a process or in this one (left out by scripts/test.sh --quick)",
    "slow": "takes about 5 s or more on its own (left out by scripts/test.sh --quick)",
}
FIXTURE_NEEDS = {"browser": "browser", "app": "server"}
HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, marker in FIXTURE_NEEDS.items():
            if fixture in item.fixturenames:
                item.add_marker(marker)
    if not HAS_TORCHVISION:
        video = [item for item in items if item.get_closest_marker("video")]
        if video:
            config.hook.pytest_deselected(items=video)
            items[:] = [item for item in items if not item.get_closest_marker("video")]
    slowest_first(items)
