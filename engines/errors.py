"""Errors that carry a message meant for the person using the app.

Every error here says what was wrong and what to do about it; the web page and
the API show ``str(error)`` as it is. Anything else that escapes an engine is a
bug and is reported as one.
"""


class ChatError(Exception):
    """Base of every error whose message is written for the user."""


class ConfigError(ChatError, ValueError):
    """A bad argument: an unknown name, a value out of range, a missing path."""


class BackendUnavailableError(ChatError, ImportError):
    """The backend's package is not installed, or cannot run on this machine."""


class ModelLoadError(ChatError):
    """The model could not be loaded; the message says why."""


class ContextLearnedError(ConfigError):
    """A server that had not said how long its model's context is refused a prompt as longer than
    it, saying the length (``context``): known from now on, the conversation may be fitted to it
    and sent again."""

    def __init__(self, message: str, context: int) -> None:
        super().__init__(message)
        self.context = context


class ChatTemplateError(ChatError):
    """The model has no usable chat template, or the template rejected the messages."""


class MediaError(ChatError, ValueError):
    """An image, video or audio input that cannot be used."""


class UnsupportedError(ChatError):
    """The loaded model or backend cannot do what was asked (scores from a generative model...).
    ``setting`` names the setting refused, where one was."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class ModelUnloadedError(ChatError):
    """The model was unloaded (or is being replaced) while it was asked for something."""


class ModelLoadingError(ModelUnloadedError):
    """No model can answer yet: one is being loaded. Asking again shortly will work."""


class ModelBusyError(ChatError):
    """Too many requests wait for the model already; this one was refused rather than queued.
    Asking again shortly will work."""


class MemoryBudgetError(ChatError):
    """A model a request asked for does not fit the server's memory budget beside the models that
    hold it now, none of which can be unloaded yet. Asking again once they are idle will work."""
