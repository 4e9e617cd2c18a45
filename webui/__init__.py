"""The web page: Gradio Blocks over the app's shared ModelSlot."""

from .layout import PAGE_KWARGS, build_demo

__all__ = ["PAGE_KWARGS", "build_demo"]
