"""GGUF files for the backends that do not run them as they are: dequantized once into a plain
safetensors directory in the cache for transformers and vLLM (later loads take under a second
instead of about 20 s), and their tokenizer read once for our prompt path (llama.cpp runs the
GGUF file itself)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..errors import ModelLoadError
from . import Progress
from .cache import written_once
from .gguf_header import read_fields


def converted_gguf_dir(gguf_path: Path, progress: Progress | None = None, generation: dict | None = None) -> Path:
    """The GGUF's weights dequantized into a safetensors directory (for transformers and vLLM)."""
    return written_once(gguf_path, "converted", _convert, "Converting {name} to safetensors (once; about 20 s)…", progress, generation)


def gguf_metadata_dir(gguf_path: Path, progress: Progress | None = None, generation: dict | None = None) -> Path:
    """The GGUF's tokenizer (with its chat template) and generation defaults, without its weights,
    for our prompt path (llama.cpp runs the GGUF file itself, and its header says the rest:
    gguf_header.py). Reading a GGUF's tokenizer takes seconds; this, once."""
    return written_once(gguf_path, "metadata", _write_metadata, "Reading {name}'s tokenizer and chat template (once)…", progress, generation)


# llama.cpp's names for multimodal architectures whose text model transformers reads under the
# name of its text architecture (their keys are the same but for the prefix).
_TEXT_ARCHITECTURES = {"qwen2vl": "qwen2", "qwen3vl": "qwen3", "qwen3vlmoe": "qwen3moe"}


def _write_metadata(gguf_path: Path, out_dir: Path, report: Progress, generation: dict | None) -> None:
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="anychat-gguf-") as scratch:
        readable = _as_text_architecture(gguf_path, Path(scratch))
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(readable.parent), gguf_file=readable.name)
        except Exception as error:
            raise ModelLoadError(f"Could not read the GGUF file {gguf_path}: {error}") from error
    tokenizer.save_pretrained(out_dir)
    # Read back by GenerationArgs.from_model_dir, as a model directory's own would be.
    (out_dir / "generation_config.json").write_text(json.dumps(generation or {}), encoding="utf-8")


def _as_text_architecture(gguf_path: Path, scratch: Path) -> Path:
    """The GGUF itself, or, for an architecture transformers does not read (_TEXT_ARCHITECTURES),
    a copy of its metadata alone (no weights: the prompt path needs none) under its text
    architecture's name."""
    architecture = (read_fields(gguf_path, ("general.architecture",)) or {}).get("general.architecture")
    text = _TEXT_ARCHITECTURES.get(architecture)
    if text is None:  # or not a GGUF that can be read: transformers says what is wrong with it
        return gguf_path
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    copy = scratch / f"{gguf_path.stem}.metadata.gguf"
    writer = gguf.GGUFWriter(copy, text)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind = field.types[0]
        renamed = text + key[len(architecture):] if key.startswith(architecture + ".") else key
        writer.add_key_value(renamed, field.contents(), kind, sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return copy


def _convert(gguf_path: Path, out_dir: Path, report: Progress, generation: dict | None) -> None:
    """transformers refuses save_pretrained on a GGUF-loaded model ("not serializable"), so the
    dequantized weights are moved into a plain model built from the same config, and saved."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source_dir, name = str(gguf_path.parent), gguf_path.name
    try:
        report(0.05, "Reading the tokenizer from the GGUF file…")
        tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=name)
        report(0.2, "Dequantizing the GGUF weights…")
        loaded = AutoModelForCausalLM.from_pretrained(source_dir, gguf_file=name, dtype=torch.bfloat16)
    except Exception as error:
        raise ModelLoadError(f"Could not read the GGUF file {gguf_path}: {error}") from error
    report(0.8, "Writing safetensors…")
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    if generation:
        plain.generation_config.update(**generation)
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
