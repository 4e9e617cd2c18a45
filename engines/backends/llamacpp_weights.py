"""The weights llama.cpp reads: the GGUF file as it is, or, with ``convert_weights`` and where
most of its weights are of a type llama.cpp's CPU kernels are slow on, a copy converted once to
Q8_0 and kept in the app's cache (engines/model_files/cache.py, as the transformers path keeps its conversion).

Q4_1 has no repacked kernel on x86, so its prompts are read a row at a time. On this project's
2-core Zen 4, the embedded SmolLM2 as shipped (Q4_1) read a 4,096-token prompt at 190-220
tokens/s and wrote 77; converted to Q8_0 (with flash attention), 281 and 100-103 (bench/prompt_read.py,
docs/benchmarks.md). llama.cpp's own quantizer converts it in half a second (145 MB), from the
Q4_1 values themselves; against the file as shipped, each token's distribution moves by a mean
KL of 0.006 and perplexity by +0.6 % (tests/test_llamacpp_engine.py), near what flash attention
alone moves it (0.004). On a GPU every type has fast kernels, and the file is read as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_cpp import llama_cpp as lib

from ..errors import ModelLoadError
from ..model_files import Progress
from ..model_files.cache import written_once
from ..model_files.gguf_header import GgufModel

# llama_ftype values: the types read faster as Q8_0 on CPU (measured: Q4_1 only).
SLOW_ON_CPU = {3: "Q4_1"}
Q8_0 = 7
CONVERTED = "model.gguf"


def weights_to_read(gguf: Path, shape: GgufModel, convert: bool, on_gpu: bool, progress: Progress | None) -> Path:
    """The file llama.cpp should open for ``gguf``: itself, or its Q8_0 conversion (written now
    unless the cache has it) where ``convert`` allows and it runs on CPU."""
    slow = SLOW_ON_CPU.get(shape.file_type)
    if not convert or on_gpu or slow is None:
        return gguf
    announce = f"Converting {{name}}'s {slow} weights to Q8_0 once, which llama.cpp reads faster on CPU…"
    return written_once(gguf, "llamacpp-q8_0", _requantized, announce, progress, None) / CONVERTED


def _requantized(gguf: Path, folder: Path, report: Progress, generation: Any) -> None:
    params = lib.llama_model_quantize_default_params()
    params.ftype = Q8_0
    params.allow_requantize = True
    status = lib.llama_model_quantize(str(gguf).encode(), str(folder / CONVERTED).encode(), params)
    if status != 0:
        raise ModelLoadError(f"llama.cpp could not convert {gguf.name} to Q8_0 (status {status}); load it with convert_weights off "
                             "to read it as it is.")
