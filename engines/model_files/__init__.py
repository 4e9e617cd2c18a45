"""The model files: which model and how it is loaded (model_args.py), on which backend
(backend_registry.py: what each backend needs and takes, and which one auto picks), where its files are (paths.py:
local paths, the embedded default, GGUF conversion into the cache), Hub downloads (hub_download.py)
and the models already on this machine (catalog.py)."""

from __future__ import annotations

from collections.abc import Callable

# How loading reports what it is doing: a fraction done and a message for the person waiting.
Progress = Callable[[float, str], None]


def within(progress: Progress | None, start: float, end: float) -> Progress | None:
    """``progress`` for one stage of a load (a conversion, a download), whose own 0 to 1 is shown
    between ``start`` and ``end`` of the whole load: the line a person watches only goes forward."""
    if progress is None:
        return None
    return lambda fraction, message: progress(start + (end - start) * fraction, message)
