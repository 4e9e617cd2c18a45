"""The weights file the llamacpp engine reads for the embedded model with its default settings
(the Q8_0 conversion of the shipped Q4_1 file: convert_weights), so that a bare llama-cpp-python
compared with our engine reads the same weights."""

from __future__ import annotations

from pathlib import Path

from engines.model_files.gguf_header import GgufModel
from engines.model_files.model_args import ModelArgs
from engines.model_files.paths import default_gguf


def embedded_weights() -> Path:
    from engines.backends.llamacpp_weights import weights_to_read

    gguf = default_gguf()
    return weights_to_read(gguf, GgufModel.read(gguf), ModelArgs.model_fields["convert_weights"].default, False, None)
