"""Model settings: which model, on which backend, how it is loaded."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

BACKEND_NAMES = ("huggingface", "vllm", "sglang", "ktransformers")
DTYPES = ("auto", "bfloat16", "float16", "float32")


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
        for name in ("image_max_pixels", "video_fps", "video_max_frames", "video_max_pixels", "audio_max_seconds"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be above 0, got {getattr(self, name)}.")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @property
    def display_name(self) -> str:
        return self.model_name_or_path or "SmolLM2-135M-Instruct (embedded)"
