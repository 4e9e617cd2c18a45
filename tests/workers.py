"""How a run with pytest-xdist (``scripts/test.sh``: ``-n 2``) shares the tests between its
workers: a module at a time, so that a module's fixtures (a loaded model, an app, a Chromium)
start once, and the slowest first, so that neither worker is left with a long module at the end
while the other waits. The modules that chat on the session's shared vLLM engine
(tests/vllm_fixtures.py) go to one worker together, so that it starts once.

(xdist's own ``--dist loadgroup`` cannot do this: it marks a group in the test's node id, which
pytest 9 no longer lets a plugin change.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_ENGINE = {"test_vllm_api": "vllm", "test_vllm_engine": "vllm"}
# The groups that took longest in a run of scripts/test.sh (quiet machine, 2026-11-27; test_compaction 2026-11-29), slowest first. The
# order only balances the workers: a module missing here runs after these; add one that grows slow.
SLOWEST_FIRST = (
    "test_isolation", "test_soak", "test_benchmarks", "vllm", "test_llamacpp_engine", "test_compaction", "test_browser",
    "test_structured_output", "test_api_reliability", "test_browser_chats", "test_huggingface_engine", "test_llamacpp_media", "test_llamacpp_build",
    "test_package_install",
    # The slowest of those that `scripts/test.sh --quick` runs, so that its last module is a short one.
    "test_api", "test_webui_handlers", "test_api_text_completions", "test_tools", "test_saved_chats", "test_page_bad_input",
)


def group_of(path: str) -> str:
    module = Path(path).stem
    return SHARED_ENGINE.get(module, module)


def slowest_first(items: list[pytest.Item]) -> None:
    """The run's tests, their modules in the order above (a stable sort: each keeps its own order)."""
    rank = {group: place for place, group in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid.split("::", 1)[0]), len(rank)))


# Optional: .venv-video runs without xdist.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0])

    # The groups in the order the tests were collected in (slowest first), not by their size.
    config.option.loadscopereorder = False
    return ByGroup(config, log)
