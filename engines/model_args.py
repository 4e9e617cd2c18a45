"""Model settings: which model, on which backend, how it is loaded."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

BACKEND_NAMES = ("huggingface", "vllm", "sglang", "ktransformers")
DTYPES = ("auto", "bfloat16", "float16", "float32")
SERVING_SETTINGS = (
    "max_model_len", "gpu_memory_utilization", "kv_cache_space_gb", "tensor_parallel_size", "enforce_eager", "lora_adapters",
)


def _default_max_concurrent() -> int:
    return int(os.environ.get("MAX_CONCURRENT", "1"))


@dataclass(frozen=True)
class ModelArgs:
    """What to load and how.

    ``model_name_or_path`` is a local HF directory, a ``.gguf`` file, or a Hub name
    (which needs the network); None means the embedded SmolLM2-135M-Instruct.
    ``max_concurrent`` bounds how many requests generate at once (env MAX_CONCURRENT).
    ``chat_template`` overrides the tokenizer's template (a Jinja string or a file path).
    ``engine_args`` passes any further keyword straight to the backend's own engine.

    Settings of the serving engines (vLLM), unused by the huggingface backend:
    ``max_model_len``: longest prompt plus reply, in tokens (None: the model's own limit).
    ``gpu_memory_utilization``: fraction of GPU memory for weights and KV cache (vLLM's default
    0.9); on CPU the KV cache is sized by ``kv_cache_space_gb`` instead.
    ``kv_cache_space_gb``: KV cache size in GiB (None: 4 on CPU; on a GPU what
    ``gpu_memory_utilization`` leaves).
    ``tensor_parallel_size``: GPUs to shard the model across (None: all visible GPUs, 1 on CPU).
    ``enforce_eager``: skip graph compilation (None: eager on CPU, where compiling takes minutes
    at every start; compiled on GPU).
    ``lora_adapters``: PEFT adapter directories (a list, or one comma-separated string). Each
    request uses the first unless it names another with the ``lora_adapter`` setting (its
    directory name), or "" for the base model.
    Media settings of multimodal models (engines/media.py applies them the same on every backend):
    ``image_max_pixels``: images are downscaled to at most this many pixels (aspect kept).
    ``video_fps``, ``video_max_frames``: frames sampled per second of video, and at most this many
    per video (spread over its whole length). ``video_max_pixels``: pixel budget of each frame.
    ``audio_max_seconds``: longer audio is refused (a model may hear less: Whisper-style ones 30 s).
    """

    model_name_or_path: str | None = None
    infer_backend: str = "huggingface"
    infer_dtype: str = "auto"
    trust_remote_code: bool = False
    max_concurrent: int = field(default_factory=_default_max_concurrent)
    chat_template: str | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    kv_cache_space_gb: float | None = None
    tensor_parallel_size: int | None = None
    enforce_eager: bool | None = None
    lora_adapters: tuple[str, ...] = ()
    image_max_pixels: int = 768 * 768
    video_fps: float = 2.0
    video_max_frames: int = 32
    video_max_pixels: int = 256 * 256
    audio_max_seconds: float = 600.0

    def __post_init__(self) -> None:
        if self.infer_backend not in BACKEND_NAMES:
            raise ConfigError(
                f"Unknown backend {self.infer_backend!r}. Choose one of: {', '.join(BACKEND_NAMES)}."
            )
        if self.infer_dtype not in DTYPES:
            raise ConfigError(f"Unknown dtype {self.infer_dtype!r}. Choose one of: {', '.join(DTYPES)}.")
        if self.max_concurrent < 1:
            raise ConfigError(f"max_concurrent must be at least 1, got {self.max_concurrent}.")
        if not isinstance(self.engine_args, dict):
            raise ConfigError("engine_args must be a dict (a JSON object) of backend engine arguments.")
        self._check_serving_settings()
        for name in ("image_max_pixels", "video_fps", "video_max_frames", "video_max_pixels", "audio_max_seconds"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be above 0, got {getattr(self, name)}.")

    def _check_serving_settings(self) -> None:
        adapters = self.lora_adapters
        if isinstance(adapters, str):
            adapters = [a.strip() for a in adapters.split(",") if a.strip()]
        # Frozen: normalising the accepted spellings is the one assignment allowed here.
        object.__setattr__(self, "lora_adapters", tuple(adapters or ()))
        problems = []
        if self.max_model_len is not None and self.max_model_len < 1:
            problems.append(f"max_model_len must be at least 1, got {self.max_model_len}")
        if not 0 < self.gpu_memory_utilization <= 1:
            problems.append(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_cache_space_gb is not None and self.kv_cache_space_gb <= 0:
            problems.append(f"kv_cache_space_gb must be above 0, got {self.kv_cache_space_gb}")
        if self.tensor_parallel_size is not None and self.tensor_parallel_size < 1:
            problems.append(f"tensor_parallel_size must be at least 1, got {self.tensor_parallel_size}")
        for adapter in self.lora_adapters:
            if not os.path.isfile(os.path.join(os.path.expanduser(adapter), "adapter_config.json")):
                problems.append(f"no LoRA adapter at {adapter} (a PEFT directory with adapter_config.json)")
        names = [os.path.basename(os.path.normpath(a)) for a in self.lora_adapters]
        if len(set(names)) != len(names):
            problems.append(f"LoRA adapters need distinct directory names, got {', '.join(names)}")
        if problems:
            raise ConfigError("Invalid model settings: " + "; ".join(problems) + ".")
        if self.infer_backend == "huggingface":
            defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name in SERVING_SETTINGS}
            used = [name for name in SERVING_SETTINGS if getattr(self, name) != defaults[name]]
            if used:
                raise ConfigError(
                    f"{', '.join(used)} {'is a setting' if len(used) == 1 else 'are settings'} of the serving "
                    "engines (vllm); the huggingface backend does not use them. Choose the vllm backend or remove them."
                )

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @property
    def display_name(self) -> str:
        return self.model_name_or_path or "SmolLM2-135M-Instruct (embedded)"
