"""The web page: Gradio Blocks over the app's shared ModelSlot.

Importing any of its modules first turns off gradio's stub writer (webui/gradio_stubs.py), so that
gradio, which they import, loads seconds faster."""

from .gradio_stubs import turn_off_stub_writer

turn_off_stub_writer()
