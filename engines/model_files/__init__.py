"""The model files: which model and how it is loaded (model_args.py), where its files are (paths.py:
local paths, the embedded default, GGUF conversion into the cache), Hub downloads (hub_download.py)
and the models already on this machine (catalog.py)."""

from collections.abc import Callable

# How loading reports what it is doing: a fraction done and a message for the person waiting.
Progress = Callable[[float, str], None]
