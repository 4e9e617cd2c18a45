"""The backend-agnostic chat layer: ``ChatModel`` over one engine per backend."""

from .admission import QueuePlace, line_user
from .base import BaseEngine, Response
from .reply_parser import ReplyChunk, ReplyParts, ToolCall
from .chat_model import ChatModel
from .errors import (
    BackendUnavailableError,
    ChatError,
    ChatTemplateError,
    ConfigError,
    MediaError,
    ModelBusyError,
    ModelLoadError,
    ModelLoadingError,
    ModelUnloadedError,
    UnsupportedError,
)
from .model_slot import ModelSlot
from .generation_args import GenerationArgs
from .model_args import BACKEND_NAMES, ModelArgs

__all__ = [
    "BACKEND_NAMES",
    "BackendUnavailableError",
    "BaseEngine",
    "ChatError",
    "ChatModel",
    "ChatTemplateError",
    "ConfigError",
    "GenerationArgs",
    "MediaError",
    "ModelArgs",
    "ModelBusyError",
    "ModelLoadError",
    "ModelLoadingError",
    "ModelSlot",
    "ModelUnloadedError",
    "QueuePlace",
    "ReplyChunk",
    "ReplyParts",
    "Response",
    "ToolCall",
    "UnsupportedError",
    "line_user",
]
