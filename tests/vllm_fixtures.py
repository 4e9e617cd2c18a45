"""The vLLM engine that the vLLM test modules share: the embedded default model on the shared
settings (harness/vllm_settings.py), started once for every test that chats on it and neither
kills nor unloads it (a test that does starts an engine of its own). tests/conftest.py imports
these fixtures, so that every module gets the same engine."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from engines import ChatModel
from harness.vllm_settings import VLLM

# vLLM's compile cache, for every engine the tests start, in this process or in an app they
# start: away from the user's own.
os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(tempfile.gettempdir(), "anychat-test-vllm-cache"))


def requests_left(model: ChatModel) -> dict[str, int]:
    """What still runs in ``model``: requests in its waiting line, and vLLM's own count."""
    counts = {"running": model.line.running, "waiting": model.line.waiting, "vllm unfinished": model.engine.unfinished_requests()}
    return {name: count for name, count in counts.items() if count}


def assert_idle(model: ChatModel, timeout: float = 10) -> None:
    """Fails unless ``model`` runs no request within ``timeout`` s: a request a test cancelled
    or left may take vLLM a moment to abort, one that still runs would be met by the next test."""
    deadline = time.monotonic() + timeout
    while left := requests_left(model):
        assert time.monotonic() < deadline, f"the test left requests in a shared vLLM engine: {left}"
        time.sleep(0.05)


def needed_later(request: pytest.FixtureRequest) -> bool:
    """Whether a test after this one in the run uses ``vllm_model``."""
    items = request.session.items
    return any("vllm_model" in getattr(item, "fixturenames", ()) for item in items[items.index(request.node) + 1:])


@pytest.fixture(scope="session")
def shared_vllm_engine():
    """Holds the shared engine once a test has started it; closes it at the session's end, however
    the session ends (a failure with -x, Ctrl-C)."""
    held: list[ChatModel] = []
    yield held
    while held:
        held.pop().close()


@pytest.fixture
def vllm_model(request, shared_vllm_engine):
    """The embedded default model (no model given) on vLLM with the shared settings, bf16 like the
    HF engine's. Each test must leave it idle. It is closed as soon as no later test of the run
    needs it, so that it never sits beside the 4 GB engines other modules start (the soak's, the
    LoRA engine, the isolation test's app)."""
    if not shared_vllm_engine:
        shared_vllm_engine.append(ChatModel(VLLM))
    [model] = shared_vllm_engine
    yield model
    assert_idle(model)
    if not needed_later(request):
        shared_vllm_engine.pop().close()
