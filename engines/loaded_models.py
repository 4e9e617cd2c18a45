"""The loaded models of a running app, which the page and the API both use: one at a time by
default, several where the operator gives them a memory budget (KeepSettings)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psutil
from pydantic import Field

from .backends import engine_class
from .chat_model import ChatModel
from .errors import MemoryBudgetError, ModelLoadingError, ModelUnloadedError
from .model_files import Progress
from .model_files.model_args import LoadSettings
from .settings import Settings

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

# The longest the idle check sleeps between looks: an idle model is unloaded at most this late
# (a shorter idle time is looked at twice in its length).
IDLE_CHECK_SECONDS = 30.0


class KeepSettings(Settings):
    """How many models the app keeps loaded, for how long, and which one writes the summaries."""

    kind = "model keeping"

    models_memory: int | None = Field(
        None, gt=0, json_schema_extra={"unit": "bytes"},
        description="memory the app may hold with several models loaded: loading another model keeps the others while the "
                    "app's resident memory stays within it, then unloads the least recently used idle ones; a request's load "
                    "(--load-on-demand) that would pass it is refused while the models holding it are busy (default: one "
                    "model at a time, loading another replaces it)",
    )
    idle_unload_minutes: float | None = Field(None, gt=0, description="unload a model nobody has used for this long (default: never)")
    load_on_demand: bool = Field(False, description="an API request naming a model the page's picker lists (its name there) loads it, "
                                                    "with the server's settings, where it is not loaded; beside the others with "
                                                    "--models-memory, the default model kept")
    summary_model: str | None = Field(
        None, description="the model (its name in the API) that writes the summaries of long chats with every model "
                          "(context_policy compact) while it is loaded beside them (--models-memory); default, and while it is not "
                          "loaded: each model summarizes its own chats")


@dataclass(frozen=True)
class ListedModel:
    """A model the server lets requests load: its load ``settings``, what it ``reads`` besides
    text where its files say (None where they do not), and the ``size`` of its files, the memory
    its weights will take once loaded."""

    settings: dict[str, Any]
    reads: tuple[str, ...] | None
    size: int


class LoadedModels:
    """The loaded ChatModels by their API id, least recently used first. Loading a model keeps
    the one it replaces (the default model, or one of the same id) serving until the new one is
    ready, so a failed load leaves it usable; then it is closed and its memory freed (peak memory
    while switching is old + new). With a memory budget (``keep.models_memory``) the others stay
    loaded, and once the app holds more than the budget the least recently used idle ones are
    unloaded. An engine that cannot live beside another (``BaseEngine.close_before_next_load``)
    is closed first, and while no model can answer, requests are told that one is loading.

    ``default``: the model the page's new chats and requests naming no model get, the one the
    operator loaded last. ``listed``: for ``keep.load_on_demand``, the models the server lists,
    by name; a request's load of one (``for_request``) never changes the default, unloads only
    idle models other than it, and is refused where the model would pass the budget."""

    def __init__(self, model: ChatModel | None = None, keep: KeepSettings = KeepSettings(),
                 listed: Callable[[], dict[str, ListedModel]] = dict) -> None:
        """``model``: one loaded already (a ChatModel built in Python), served until another is loaded."""
        self.keep = keep
        self._listed = listed
        self._models: OrderedDict[str, ChatModel] = OrderedDict()
        self._last_used: dict[str, float] = {}
        self._default: str | None = None
        # Loads one at a time; the table of models is held only while it changes, never while a
        # model loads (a request for another model must not wait for that).
        self._loads = threading.Lock()
        self._lock = threading.Lock()
        self.loading: str | None = None
        self._idle_check: threading.Thread | None = None
        self._all_unloaded = threading.Event()
        # The tracer of its models' replies where the operator traces (api/traces.py sets it), else None.
        self.tracer: Tracer | None = None
        if model is not None:
            with self._lock:
                self._keep(model, default=True)

    @property
    def model(self) -> ChatModel:
        """The default model."""
        model = self._models.get(self._default) if self._default is not None else None
        if model is None:
            loading = self.loading
            if loading is not None:
                raise ModelLoadingError(f"{loading} is loading, so no model can answer yet. Try again in a moment.")
            raise ModelUnloadedError("No model is loaded. Load one in the Settings tab.")
        return model

    @property
    def empty(self) -> bool:
        """Whether no model is loaded."""
        return not self._models

    @property
    def several(self) -> bool:
        """Whether models are kept beside each other (a memory budget), rather than one replacing another."""
        return self.keep.models_memory is not None

    @property
    def models(self) -> list[ChatModel]:
        """Every loaded model, the default first, then the most recently used."""
        with self._lock:
            models = list(reversed(self._models.values()))
            default = self._models.get(self._default) if self._default is not None else None
        return [default, *(model for model in models if model is not default)] if default is not None else models

    def for_request(self, model_id: str | None, admit: Callable[[], None] | None = None) -> ChatModel | None:
        """The model that answers a request naming ``model_id`` (None: the default model), now
        used; None where no model of that id is loaded and none may be loaded for it. A request
        may load one where ``admit`` is given (the door's own check, called just before the
        load, not for a model loaded meanwhile: what it raises refuses the load) and the server
        lists a model of that name and lets requests load it (``keep.load_on_demand``). That
        blocks while it loads; a MemoryBudgetError where it would pass the budget beside the busy
        models."""
        if model_id is None:
            return self.model
        with self._lock:
            model = self._models.get(model_id)
            if model is not None:
                self._used(model_id)
        if model is not None or admit is None or not self.keep.load_on_demand:
            return model
        listed = self._listed().get(model_id)
        if listed is None:
            return None
        return self._load_listed(listed, admit)

    def offered(self) -> dict[str, ListedModel]:
        """The models a request may load (``keep.load_on_demand``) that are not loaded, by name."""
        if not self.keep.load_on_demand:
            return {}
        loaded = {model.model_id for model in self.models}
        return {name: listed for name, listed in self._listed().items() if name not in loaded}

    def load(self, args: Mapping[str, Any] | None = None, progress: Progress | None = None) -> ChatModel:
        """Load a model from ``args`` (ChatModel's settings) and make it the default: the
        operator's load, which may pass the budget where the models holding it are busy."""
        settings = LoadSettings.check(args)
        engine_class(settings.model.backend)  # fail fast, before any loading
        with self._loads:
            new_model = self._new_model(settings, progress)
            with self._lock:
                replaced = [self._drop(model_id) for model_id in list(self._models)
                            if model_id == new_model.model_id or not self.several]
                self._keep(new_model, default=True)
            close_all(replaced)
            self._fit_budget(keeping=new_model.model_id)
        return new_model

    def _load_listed(self, listed: ListedModel, admit: Callable[[], None]) -> ChatModel:
        """A listed model loaded for a request: beside the others and never the default (one at
        a time, it replaces the model loaded, as any load does). Within the budget, only idle
        models other than the default are unloaded to make room, and where that is not enough the
        load is refused: before it starts where the size of its files does not fit, else once it
        is loaded and measured, before any request reaches it (its context and buffers take more
        than its files)."""
        settings = LoadSettings.check(listed.settings)
        engine_class(settings.model.backend)
        model_id = settings.model.model_id
        with self._loads:
            if (model := self.for_request(model_id)) is not None:
                return model  # loaded for a request just before
            admit()
            if not self._fit_budget(keeping=self._default, more=listed.size):
                raise MemoryBudgetError(self._budget_full(model_id, listed.size))
            before = resident_memory()
            new_model = self._new_model(settings, None)
            taken = resident_memory() - before
            if not self._fit_budget(keeping=self._default):
                new_model.close()
                raise MemoryBudgetError(self._budget_full(model_id, taken))
            with self._lock:
                replaced = [self._drop(old_id) for old_id in list(self._models) if not self.several]
                self._keep(new_model, default=self._default is None or not self.several)
            close_all(replaced)
        return new_model

    def _new_model(self, settings: LoadSettings, progress: Progress | None) -> ChatModel:
        """The model of ``settings`` loaded, not yet served; those that cannot live beside it closed first."""
        with self._lock:
            alone = [self._drop(model_id) for model_id, model in list(self._models.items())
                     if model.engine is not None and model.engine.close_before_next_load]
        close_all(alone)
        self.loading = f"{settings.model.display_name} (on {settings.model.backend})"
        try:
            return ChatModel(settings, progress)
        finally:
            self.loading = None

    def _budget_full(self, model_id: str, size: int) -> str:
        """Why a request's load of ``model_id`` is refused: the budget, and the models that hold it."""
        with self._lock:
            # Every other model is in use: an idle one would have been unloaded to make room.
            holding = [f"{held_id} ({'the default' if held_id == self._default else 'in use'})" for held_id in reversed(self._models)]
        return (f"Loading {model_id} ({in_mib(size)}) would pass this server's memory budget of {in_mib(self.keep.models_memory)} "
                f"(--models-memory): the app holds {in_mib(resident_memory())} with {', '.join(holding) or 'no model'} loaded, and "
                "neither the default model nor one in use is unloaded for a request. Try again once a reply has ended, ask a "
                "loaded model, or ask the server's operator for a larger budget.")

    def unload(self, model_id: str | None = None) -> None:
        """Unload the model of that id, or every model (None); an id not loaded is let be."""
        self._unload(lambda: [old_id for old_id in self._models if model_id in (None, old_id)])

    def unload_default(self) -> None:
        """Unload the default model; the most recently used of the others becomes the default."""
        self._unload(lambda: [self._default] if self._default is not None else [])

    def _unload(self, chosen: Callable[[], list[str]]) -> None:
        """Unload the ``chosen`` models, as the table says once a load under way has ended: loads
        and unloads happen in the order asked."""
        with self._loads:
            with self._lock:
                dropped = [self._drop(model_id) for model_id in chosen()]
            close_all(dropped)

    def describe(self) -> str:
        """One line for a status bar: what is loaded, on which backend, how long it took."""
        models = self.models
        if not models:
            return f"Loading {self.loading}…" if self.loading else "No model loaded."
        model = models[0]
        why = f" ({model.backend_reason})" if model.backend_reason else ""
        others = f" Also loaded: {', '.join(other.model_id for other in models[1:])}." if len(models) > 1 else ""
        cache = model.prompt_cache
        kept = (f" Prompt cache: {cache['conversations']} conversation{'' if cache['conversations'] == 1 else 's'}, "
                f"{cache['memory_bytes'] / 2**20:,.0f} MiB." if cache else "")
        return f"Loaded {model.display_name} on {model.backend}{why} in {model.load_seconds:.1f} s.{kept}{others}"

    # ---- keeping (each with the table's lock held, but for what closes models)

    def _summarizer(self) -> ChatModel | None:
        """The model that writes summaries (``keep.summary_model``), where it is loaded."""
        return None if self.keep.summary_model is None else self.for_request(self.keep.summary_model)

    def _keep(self, model: ChatModel, default: bool) -> None:
        model.summarizer = self._summarizer
        model.tracer = lambda: self.tracer
        self._models[model.model_id] = model
        if default:
            self._default = model.model_id
        self._used(model.model_id)
        self._all_unloaded.clear()
        if self.keep.idle_unload_minutes is not None and self._idle_check is None:
            self._idle_check = threading.Thread(target=self._unload_idle, name="unload idle models", daemon=True)
            self._idle_check.start()

    def _used(self, model_id: str) -> None:
        self._models.move_to_end(model_id)
        self._last_used[model_id] = time.monotonic()

    def _drop(self, model_id: str) -> ChatModel:
        """The model taken out of those served (no new request reaches it), to be closed; the
        default passes to the most recently used of the others."""
        self._last_used.pop(model_id, None)
        model = self._models.pop(model_id)
        if self._default == model_id:
            self._default = next(reversed(self._models), None)
        if not self._models:
            self._all_unloaded.set()
        return model

    def _fit_budget(self, keeping: str | None, more: int = 0) -> bool:
        """While the app's memory and ``more`` pass the budget, unload the least recently used
        idle model other than ``keeping`` and the default; whether they fit in the end."""
        budget = self.keep.models_memory
        while budget is not None and resident_memory() + more > budget:
            with self._lock:
                idle = next((model_id for model_id, model in self._models.items()
                             if model_id not in (keeping, self._default) and idle_now(model)), None)
                if idle is None:
                    return False
                evicted = self._drop(idle)
            close_all([evicted])
        return True

    def _unload_idle(self) -> None:
        """Unload each model idle for ``keep.idle_unload_minutes``; ends once none is loaded."""
        idle_seconds = self.keep.idle_unload_minutes * 60
        while True:
            self._all_unloaded.wait(min(IDLE_CHECK_SECONDS, idle_seconds / 2))
            now = time.monotonic()
            with self._lock:
                for model_id, model in self._models.items():
                    if not idle_now(model):
                        self._last_used[model_id] = now  # busy counts as used, until it ends
                expired = [self._drop(model_id) for model_id, used in list(self._last_used.items()) if now - used >= idle_seconds]
                if not self._models:
                    self._idle_check = None
            close_all(expired)
            if self._idle_check is not threading.current_thread():
                return


def close_all(models: list[ChatModel]) -> None:
    for model in models:
        model.close()


def idle_now(model: ChatModel) -> bool:
    """No request answered by ``model``, none waiting for it, and no reply holding it between two of its answers."""
    return model.engine is not None and not model.in_use


def resident_memory() -> int:
    return psutil.Process().memory_info().rss


def in_mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"
