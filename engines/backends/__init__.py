"""The backends: the contract each implements (base.py) and one file per backend. What each needs
and takes is in engines/model_files/backend_registry.py, below them, where the model's settings
read it; it imports no backend: a backend's module is imported only when a model is loaded on it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import BackendUnavailableError
from ..model_files.backend_registry import BACKENDS, unavailable_reason

if TYPE_CHECKING:
    from .base import BaseEngine


def engine_class(name: str) -> type[BaseEngine]:
    """The engine class of backend ``name`` (a ModelArgs-checked name), imported now, or a clear
    error saying what to install."""
    unavailable = unavailable_reason(name)
    if unavailable is not None:
        raise BackendUnavailableError(unavailable[0].upper() + unavailable[1:] + ".")
    return getattr(importlib.import_module(f"{__name__}.{name}"), BACKENDS[name].class_name)
