"""The backend-agnostic chat layer: ``ChatModel`` over one engine per backend."""

from .backends.base import BaseEngine, Response
from .chat_model import ChatModel
from .errors import (
    BackendUnavailableError,
    ChatError,
    ChatTemplateError,
    ConfigError,
    MediaError,
    MemoryBudgetError,
    ModelBusyError,
    ModelLoadError,
    ModelLoadingError,
    ModelUnloadedError,
    UnsupportedError,
)
from .generation_args import GenerationArgs
from .loaded_models import KeepSettings, LoadedModels
from .model_files.backend_registry import BACKEND_NAMES
from .model_files.model_args import ModelArgs
from .prompt.reply_parser import ReplyChunk, ReplyParts, ToolCall
from .prompt_progress import PromptRead
from .request import ChatRequest
from .waiting_line import QueuePlace, line_user

__all__ = [
    "BACKEND_NAMES",
    "BackendUnavailableError",
    "BaseEngine",
    "ChatError",
    "ChatModel",
    "ChatRequest",
    "ChatTemplateError",
    "ConfigError",
    "GenerationArgs",
    "KeepSettings",
    "LoadedModels",
    "MediaError",
    "MemoryBudgetError",
    "ModelArgs",
    "ModelBusyError",
    "ModelLoadError",
    "ModelLoadingError",
    "ModelUnloadedError",
    "PromptRead",
    "QueuePlace",
    "ReplyChunk",
    "ReplyParts",
    "Response",
    "ToolCall",
    "UnsupportedError",
    "line_user",
]
