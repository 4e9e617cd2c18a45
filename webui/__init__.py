"""The web page: Gradio Blocks over the app's shared ModelSlot."""

from .layout import PAGE_KWARGS, build_demo
from .model_rights import ModelRights

__all__ = ["PAGE_KWARGS", "ModelRights", "build_demo"]
