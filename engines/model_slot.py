"""The one shared model of a running app, which the page and the API both use and can swap."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .backends import engine_class
from .chat_model import ChatModel
from .errors import ModelLoadingError, ModelUnloadedError
from .model_files import Progress
from .model_files.model_args import LoadSettings


class ModelSlot:
    """Holds at most one ChatModel. Loading a new one keeps the old one serving until the new
    one is ready, so a failed load leaves the previous model usable; then the old one is closed
    and its memory freed. (Peak memory while switching is therefore old + new.) An engine that
    cannot live beside another (``BaseEngine.close_before_next_load``) is closed first, and
    while no model can answer, requests are told that one is loading."""

    def __init__(self, model: ChatModel | None = None) -> None:
        """``model``: one loaded already (a ChatModel built in Python), served until another is loaded."""
        self._model = model
        self._lock = threading.Lock()
        self.loading: str | None = None

    @property
    def model(self) -> ChatModel:
        model = self._model
        if model is None:
            loading = self.loading
            if loading is not None:
                raise ModelLoadingError(f"{loading} is loading, so no model can answer yet. Try again in a moment.")
            raise ModelUnloadedError("No model is loaded. Load one in the Settings tab.")
        return model

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self, args: Mapping[str, Any] | None = None, progress: Progress | None = None) -> ChatModel:
        """Load a model from ``args`` (ChatModel's settings) and make it the shared one."""
        settings = LoadSettings.check(args)
        engine_class(settings.model.backend)  # fail fast, before any loading
        with self._lock:
            self.loading = f"{settings.model.display_name} (on {settings.model.backend})"
            try:
                if self._model is not None and self._model.engine is not None and self._model.engine.close_before_next_load:
                    self._model, old_model = None, self._model
                    old_model.close()
                new_model = ChatModel(settings, progress)
                old_model, self._model = self._model, new_model
            finally:
                self.loading = None
        if old_model is not None:
            old_model.close()
        return new_model

    def unload(self) -> None:
        with self._lock:
            old_model, self._model = self._model, None
        if old_model is not None:
            old_model.close()

    def describe(self) -> str:
        """One line for a status bar: what is loaded, on which backend, how long it took."""
        model = self._model
        if model is None:
            return f"Loading {self.loading}…" if self.loading else "No model loaded."
        why = f" ({model.backend_reason})" if model.backend_reason else ""
        return f"Loaded {model.display_name} on {model.backend}{why} in {model.load_seconds:.1f} s."
