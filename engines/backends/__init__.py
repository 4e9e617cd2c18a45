"""The backends: the contract each implements (base.py), one file per backend, and the registry
of what each needs and takes (registry.py, which imports no backend: a backend's module is
imported only when a model is loaded on it)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import BackendUnavailableError
from .registry import BACKENDS, missing_packages

if TYPE_CHECKING:
    from .base import BaseEngine


def engine_class(name: str) -> type[BaseEngine]:
    """The engine class of backend ``name`` (a ModelArgs-checked name), imported now, or a clear
    error saying what to install."""
    backend = BACKENDS[name]
    missing = missing_packages(name)
    if missing:
        raise BackendUnavailableError(
            f"The {name} backend needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed here. Install with: {backend.install}"
        )
    return getattr(importlib.import_module(f"{__name__}.{name}"), backend.class_name)
