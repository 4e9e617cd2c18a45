"""A model switch caught in the middle: the real load, held at its first progress report."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engines import LoadedModels


@contextmanager
def load_held(loaded_models: LoadedModels, settings: dict[str, Any] | None = None) -> Iterator[None]:
    """Inside the block ``loaded_models`` is loading ``settings`` and no model can answer yet; on leaving,
    the load goes on to the end."""
    loading, release = threading.Event(), threading.Event()

    def progress(fraction: float, message: str) -> None:
        loading.set()
        release.wait(300)

    loader = threading.Thread(target=loaded_models.load, args=(settings,), kwargs={"progress": progress})
    loader.start()
    try:
        assert loading.wait(300), "the load never reported progress"
        yield
    finally:
        release.set()
        loader.join()
