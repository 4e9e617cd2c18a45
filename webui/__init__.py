"""The web page: Gradio Blocks over the app's shared LoadedModels.

Importing any of its modules first has gradio imported without what a running page never uses
(webui/gradio_patches/gradio_import.py), so that gradio, which they import, loads seconds faster."""

from .gradio_patches.gradio_import import lean_gradio

lean_gradio()
