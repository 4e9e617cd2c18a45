"""Model settings: which model, on which backend, how it is loaded."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator

from ..errors import ConfigError
from ..generation_args import INT32_MAX, GenerationArgs
from ..settings import Settings, page_control
from .backend_registry import AUTO, BACKEND_NAMES, BACKENDS, backends_taking, choose_backend
from .server_address import server_address, shown_address

# Built from the registry, so that a backend added there is a choice here too.
BackendChoice = Literal[(AUTO, *BACKEND_NAMES)]
Dtype = Literal["auto", "bfloat16", "float16", "float32"]
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"


# Requests sent to a remote server at once where nothing says how many: the server batches them
# (and has its own line), so one at a time would only make its users wait on this one.
REMOTE_MAX_CONCURRENT = 16


def _default_max_concurrent() -> int:
    return int(os.environ.get("MAX_CONCURRENT", "1"))


def _default_max_waiting() -> int:
    return int(os.environ.get("MAX_WAITING", "32"))


def _default_max_waiting_per_user() -> int:
    return int(os.environ.get("MAX_WAITING_PER_USER", "16"))


class MediaSettings(Settings):
    """How media are read, the same way on every backend (engines/prompt/media.py, within the limits of
    engines/prompt/media_budget.py): the size they reach the model at, and what one request may make the
    server decode. Sizes and lengths are checked from each file's header before it is decoded;
    counts and totals are per request, the files of earlier messages included."""

    kind = "media"

    image_max_pixels: int = Field(768 * 768, gt=0, description="images are downscaled to at most this many pixels")
    image_max_count: int = Field(32, gt=0, description="images per request at most")
    image_max_source_pixels: int = Field(50_000_000, gt=0, description="pixels of one image as decoded (width x height); a larger image is refused")
    image_max_total_pixels: int = Field(200_000_000, gt=0, description="pixels decoded for one request's images together")
    video_fps: float = Field(2.0, gt=0, description="frames sampled per second of video")
    video_max_frames: int = Field(32, gt=0, description="frames per video at most, spread over its length")
    video_max_pixels: int = Field(256 * 256, gt=0, description="pixel budget of each video frame")
    video_max_count: int = Field(4, gt=0, description="videos per request at most")
    video_max_source_pixels: int = Field(7680 * 4320, gt=0, description="pixels of a video's frames as stored (width x height); larger is refused")
    video_max_seconds: float = Field(600.0, gt=0, description="longer video is refused")
    video_max_total_pixels: int = Field(
        4_000_000_000, gt=0,
        description="pixels decoded for one request's videos together: every frame decoded to reach the sampled ones, times its size",
    )
    audio_max_seconds: float = Field(600.0, gt=0, description="longer audio is refused")
    audio_max_count: int = Field(8, gt=0, description="audio clips per request at most")
    audio_max_channels: int = Field(8, gt=0, description="channels of one audio clip at most")
    audio_max_sample_rate: int = Field(192_000, gt=0, description="samples per second of one audio clip at most")
    audio_max_total_seconds: float = Field(1200.0, gt=0, description="seconds of audio in one request together")


class ModelArgs(MediaSettings):
    """What to load and how. Settings under "serving" are taken by some backends only (each
    backend lists its own in backend_registry.py); giving one to a backend that does not take
    it is an error rather than a setting silently dropped. The media settings (MediaSettings)
    are applied by engines/prompt/media.py the same way on every backend."""

    kind = "model"

    model_name_or_path: str | None = Field(
        None, description="a local HF directory, a .gguf file, or a Hub name (needs the network); by default the embedded SmolLM2",
        json_schema_extra=page_control("Model", elem_id="model-path",
                                       placeholder=f"Local directory, .gguf file or Hub name (empty: embedded {EMBEDDED_MODEL_NAME})"),
    )
    infer_backend: BackendChoice = Field(
        AUTO, description="the inference backend; auto picks llamacpp for a GGUF file (the embedded default is one) where "
                          "llama-cpp-python is installed, huggingface otherwise, and says which and why when the model loads",
        json_schema_extra=page_control("Backend", elem_id="backend", info="auto: llamacpp for GGUF files where installed, else huggingface"),
    )
    infer_dtype: Dtype = Field("auto", description="auto keeps the checkpoint's own", json_schema_extra=page_control("dtype", elem_id="dtype"))
    trust_remote_code: bool = Field(False, description="run code shipped with the model; the app takes it from its command line only, "
                                                       "for every model it loads (the page and requests cannot ask for it)")
    max_concurrent: int = Field(default_factory=_default_max_concurrent, ge=1, le=1024,
                                description="requests generating at once; more wait in line (default: env MAX_CONCURRENT, else 1, "
                                            f"and {REMOTE_MAX_CONCURRENT} for a remote server, which batches them)",
                                json_schema_extra=page_control("Max concurrent requests"))
    max_waiting: int = Field(default_factory=_default_max_waiting, ge=0, le=100_000,
                             description="requests waiting for a free slot at most; more are refused, with 503 and Retry-After on /v1 "
                                         "(default: env MAX_WAITING, else 32)")
    # As many as the replies of one streamed request (n) may be, so that any request fits.
    max_waiting_per_user: int = Field(default_factory=_default_max_waiting_per_user, ge=1, le=100_000,
                                      description="places in line one user (the login, else the client's address) may hold; more are "
                                                  "refused, and the line takes users in turn (default: env MAX_WAITING_PER_USER, else 16)")
    chat_template: str | None = Field(None, description="a Jinja template, or a file holding one, for models without their own")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="further keyword arguments for the backend's own engine (a JSON object)",
                                        json_schema_extra=page_control("Other engine arguments (JSON object)", placeholder='{"max_num_seqs": 8}'))
    served_model_name: str | None = Field(None, description="the model's id in the API (default: its file or directory name)")
    # ---- serving
    max_model_len: int | None = Field(None, ge=1, le=INT32_MAX, description="longest prompt plus reply in tokens; None: the model's own limit",
                                      json_schema_extra=page_control("Max model length (tokens)"))
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="fraction of GPU memory for weights and KV cache",
                                                 json_schema_extra=page_control("GPU memory fraction"))
    kv_cache_space_gb: float | None = Field(None, gt=0, le=1 << 20, description="KV cache size in GiB (vLLM on CPU: 4 by default)",
                                            json_schema_extra=page_control("KV cache on CPU (GiB, vllm)", elem_id="kv-cache-gb"))
    tensor_parallel_size: int | None = Field(None, ge=1, le=1024, description="GPUs to shard the model across; None: all visible",
                                             json_schema_extra=page_control("Tensor parallel size (0: all GPUs)"))
    enforce_eager: bool | None = Field(None, description="skip graph compilation; None: eager on CPU only",
                                       json_schema_extra=page_control("Graphs (auto: eager on CPU)", elem_id="engine-mode"))
    lora_adapters: tuple[str, ...] = Field((), description="PEFT adapter directories (a list, or one comma-separated string)",
                                           json_schema_extra=page_control("LoRA adapter directories (comma-separated)"))
    threads: int | None = Field(None, ge=1, le=1024, description="CPU threads; None: the physical cores but one to generate (ggml's threads stall when any other busy thread "
                                            "takes their core), all of them to read prompts, each step on no more cores than "
                                            "other processes leave free",
                                json_schema_extra=page_control("CPU threads (llamacpp; 0: physical cores but one)"))
    batch_size: int | None = Field(None, ge=1, le=INT32_MAX, description="prompt tokens processed per step",
                                   json_schema_extra=page_control("Prompt batch size (llamacpp)"))
    convert_weights: bool = Field(True, description="llamacpp on CPU: read a GGUF of Q4_1 weights as Q8_0, converted once and kept in "
                                                   "the cache (prompts read 1.4x and replies are written 1.3x as fast here; replies may "
                                                   "part from the file's own at near-ties); False: the file as it is",
                                  json_schema_extra=page_control("Convert Q4_1 weights to Q8_0 (llamacpp, CPU)", elem_id="convert-weights"))
    prompt_cache_gb: float | None = Field(None, ge=0, le=1 << 20,
                                          description="memory for conversations' prompt state kept across chats, so that a chat "
                                                      "taken up again is not read again (llamacpp, huggingface); None: an eighth of the "
                                                      "machine's memory, at most 8; 0: none",
                                          json_schema_extra=page_control("Prompt cache (GiB, llamacpp and transformers; empty: an eighth of memory)",
                                                                         elem_id="prompt-cache-gb"))
    prompt_cache_dir: str | None = Field(None, description="a folder the prompt cache is written to as well (as much as it keeps in "
                                                           "memory), so that it outlives a restart (llamacpp); None: memory only",
                                         json_schema_extra=page_control("Prompt cache folder (llamacpp; empty: memory only)",
                                                                        elem_id="prompt-cache-dir"))
    gpu_layers: int | None = Field(None, ge=-1, le=100_000, description="layers offloaded to the GPU; -1 all, 0 none; None: all where llama.cpp was built for a GPU",
                                   json_schema_extra=page_control("GPU layers (llamacpp; -1: all)"))
    mmproj: str | None = Field(None, description="the multimodal projector (mmproj GGUF) that reads images or audio for the model; "
                                                 "None: an mmproj*.gguf file beside the model that fits it",
                               json_schema_extra=page_control("Projector (llamacpp; mmproj .gguf, empty: found beside the model)",
                                                              elem_id="mmproj"))

    remote_model: str | None = Field(None, description="the model to use on a remote server that serves several (its id in the server's "
                                                       "/v1/models); None: the first it lists",
                                     json_schema_extra=page_control("Model on the server (remote; empty: its first)"))
    remote_api_key: SecretStr | None = Field(None, description="the key a remote server asks for (sent as a Bearer token; never shown nor logged)",
                                             json_schema_extra=page_control("Server's API key (remote)", type="password"))

    # The backend that runs the model and why (None when the user chose it), decided once, when
    # the settings are built: auto looks at what is installed, which is no question to ask again.
    _backend: tuple[str, str | None] = PrivateAttr()

    @field_validator("served_model_name")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and (not value or any(c.isspace() or c in "[](){}" for c in value)):
            raise ValueError(f"must be a plain name without spaces or brackets, like my-model; got {value!r}")
        return value

    @field_validator("engine_args")
    @classmethod
    def _no_remote_code(cls, engine_args: dict[str, Any]) -> dict[str, Any]:
        # vLLM and SGLang take trust_remote_code among their engine arguments; there it would
        # override the setting below, which the app gives only from its command line.
        if any(name.replace("-", "_").lower() == "trust_remote_code" for name in engine_args):
            raise ValueError(
                "must not hold trust_remote_code: running code shipped with a model is the server's choice, "
                "made only on its command line (start app.py with --trust-remote-code; from Python, the trust_remote_code setting)"
            )
        return engine_args

    @field_validator("lora_adapters", mode="before")
    @classmethod
    def _adapter_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(a.strip() for a in value.split(",") if a.strip())
        return () if value is None else value

    @field_validator("lora_adapters")
    @classmethod
    def _adapters_exist(cls, adapters: tuple[str, ...]) -> tuple[str, ...]:
        problems = [
            f"no LoRA adapter at {adapter} (a PEFT directory with adapter_config.json)"
            for adapter in adapters
            if not os.path.isfile(os.path.join(os.path.expanduser(adapter), "adapter_config.json"))
        ]
        names = [adapter_name(a) for a in adapters]
        if len(set(names)) != len(names):
            problems.append(f"LoRA adapters need distinct directory names, got {', '.join(names)}")
        if problems:
            raise ValueError("has " + "; ".join(problems))
        return adapters

    @model_validator(mode="before")
    @classmethod
    def _remote_servers_batch(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("max_concurrent") is not None or "MAX_CONCURRENT" in os.environ:
            return data
        if choose_backend(data.get("infer_backend", AUTO), data.get("model_name_or_path"))[0] != "remote":
            return data
        return {**data, "max_concurrent": REMOTE_MAX_CONCURRENT}

    @model_validator(mode="after")
    def _choose_backend(self) -> ModelArgs:
        """Record the backend, and refuse the serving settings it does not take."""
        self._backend = choose_backend(self.infer_backend, self.model_name_or_path)
        if self.backend == "remote":
            server_address(self.model_name_or_path or "")
        taken = BACKENDS[self.backend].settings
        unused = [name for name in self.non_defaults() if name in backends_taking() and name not in taken]
        if unused:
            details = "; ".join(f"{name} is taken by {', '.join(backends_taking()[name])}" for name in unused)
            raise ValueError(
                f"the {self.backend} backend does not use {', '.join(unused)} ({details}): "
                "choose one of those backends or leave the setting out"
            )
        return self

    @property
    def backend(self) -> str:
        """The backend that runs the model: ``infer_backend``, or the one auto chose."""
        return self._backend[0]

    @property
    def prompt_cache_bytes(self) -> int:
        """What the prompt cache may hold: ``prompt_cache_gb``, by default an eighth of the
        machine's memory, at most 8 GiB (llama.cpp's server keeps 8 GiB by default)."""
        if self.prompt_cache_gb is not None:
            return int(self.prompt_cache_gb * 2**30)
        import psutil

        return min(psutil.virtual_memory().total // 8, 8 * 2**30)

    @property
    def backend_reason(self) -> str | None:
        """Why auto chose the backend (None when the user chose it)."""
        return self._backend[1]

    @property
    def display_name(self) -> str:
        """How the page and messages name the model: a local model by its file or directory name,
        not its path on the server (every user of the page sees it)."""
        if self.model_name_or_path is None:
            return f"{EMBEDDED_MODEL_NAME} (embedded)"
        if self.backend == "remote":
            return shown_address(self.model_name_or_path) + (f" ({self.remote_model})" if self.remote_model else "")
        return self._name_on_disk() or self.model_name_or_path

    @property
    def model_id(self) -> str:
        """The name API clients use for this model: served_model_name, else a Hub name as it is,
        else the file or directory name (a remote model's: the id its server gives it, once loaded)."""
        if self.served_model_name:
            return self.served_model_name
        if self.model_name_or_path is None:
            return EMBEDDED_MODEL_NAME
        if self.backend == "remote":
            return self.remote_model or shown_address(self.model_name_or_path)
        name = self._name_on_disk()
        if name is None:
            return self.model_name_or_path
        return name.removesuffix(".gguf").replace(" ", "-") or "model"

    def _name_on_disk(self) -> str | None:
        """The file or directory name of a model on this machine (None for a Hub name)."""
        path = os.path.expanduser(self.model_name_or_path)
        return os.path.basename(os.path.normpath(path)) if os.path.exists(path) else None


def adapter_name(adapter: str) -> str:
    """How a request names a LoRA adapter: its directory name."""
    return os.path.basename(os.path.normpath(adapter))


@dataclass(frozen=True)
class LoadSettings:
    """The settings of one load, checked once: the model's, and the generation settings given
    with them, which apply over the model's own defaults (its generation_config.json)."""

    model: ModelArgs
    generation: dict[str, Any]

    @classmethod
    def check(cls, args: Mapping[str, Any] | None) -> LoadSettings:
        """Split one flat settings dict into model and generation settings, and check both before
        anything slow starts; a ConfigError says what is wrong."""
        args = dict(args or {})
        model_names, generation_names = set(ModelArgs.names()), set(GenerationArgs.names())
        unknown = sorted(set(args) - model_names - generation_names)
        if unknown:
            raise ConfigError(
                f"Unknown setting(s): {', '.join(unknown)}. Model settings: {', '.join(ModelArgs.names())}; "
                f"generation settings: {', '.join(GenerationArgs.names())}."
            )
        model = ModelArgs.build(**{name: value for name, value in args.items() if name in model_names})
        generation = {name: value for name, value in args.items() if name in generation_names}
        GenerationArgs().replace(**generation)
        return cls(model, generation)
