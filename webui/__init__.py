"""The web page: Gradio Blocks over the app's shared ModelSlot."""

from .file_cache import FileCache
from .layout import PAGE_KWARGS, build_demo
from .model_rights import ModelRights

__all__ = ["PAGE_KWARGS", "FileCache", "ModelRights", "build_demo"]
