"""The SGLang backend: SGLang's in-process Engine, driven from ChatModel's event loop.

SGLang needs an NVIDIA GPU: its PyPI wheels carry only CUDA kernels. ``sglang.Engine`` starts
the scheduler and detokenizer in subprocesses and keeps its tokenizer manager on the event loop
it is created on, which is ChatModel's; replies stream from there with ``async_generate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
import uuid
import wave
from collections.abc import AsyncIterator, Iterator
from typing import Any

from transformers import AutoConfig, AutoTokenizer

from .base import BaseEngine, Response
from .errors import BackendUnavailableError, ChatError, ConfigError, ModelLoadError, UnsupportedError
from .generation_args import GenerationArgs
from .media import describe, load_audio, load_image, load_video
from .model_args import ModelArgs
from .model_files import Progress, resolve_model_path
from .multimodal import MediaProcessor, is_multimodal
from .request import ChatRequest, build_request, render_chat, template_source
from .text_stream import find_stop

logger = logging.getLogger(__name__)


class SGLangEngine(BaseEngine):
    name = "sglang"
    extra_sampling_params = frozenset({"presence_penalty", "frequency_penalty", "min_p"})
    # Engine.shutdown() kills every child process of ours, a new engine's included.
    close_before_next_load = True
    # The ServerArgs field that makes stream chunks carry only the new text (forks name it differently).
    incremental_output_arg = "incremental_streaming_output"

    def __init__(self, model_args: ModelArgs, generation: dict[str, Any] | None = None, progress: Progress | None = None) -> None:
        report = progress or (lambda fraction, message: None)
        self.model_args = model_args
        self.check_machine(report)
        self.model_path = path = resolve_model_path(model_args.model_name_or_path, progress)
        report(0.2, f"Reading the tokenizer of {model_args.display_name}…")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=model_args.trust_remote_code)
            config = AutoConfig.from_pretrained(path, trust_remote_code=model_args.trust_remote_code)
        except (OSError, ValueError, KeyError) as error:
            raise ModelLoadError(
                f"Could not read {model_args.display_name}: {error}. Give a local model directory "
                "(with config.json), a .gguf file, or a Hub name (which needs the network)."
            ) from error
        if any(a.endswith("ForSequenceClassification") for a in config.architectures or ()):
            raise UnsupportedError(
                f"{model_args.display_name} is a reward model; the {self.name} engine serves generative "
                "models only. Load reward models on the huggingface backend."
            )
        self.can_generate = True
        # Our processor only shapes the prompt (each placeholder as the template wants it) and says
        # which media the model takes; SGLang runs the model's processor on the media itself.
        self._media = MediaProcessor.load(path, model_args) if is_multimodal(config) else None
        self.media_kinds = self._media.kinds if self._media else frozenset()
        self.generating_args = GenerationArgs.from_model_dir(path).replace(**(generation or {}))
        # Older multimodal checkpoints keep their chat template with the processor only.
        self._template = template_source(self._media.processor if self._media else self.tokenizer, model_args.chat_template)
        server_args = self.server_args(path)
        self._incremental = bool(server_args.get(self.incremental_output_arg))
        self._honours_seeds = bool(server_args.get("enable_deterministic_inference"))
        report(0.3, f"Starting {self.name} with {model_args.display_name} (weights, KV cache, CUDA graphs: this takes minutes)…")
        started = time.perf_counter()
        self.model = self._runtime = start_runtime(server_args, model_args.display_name)
        self.load_seconds = time.perf_counter() - started
        report(1.0, f"{self.name} is serving {model_args.display_name}.")

    def check_machine(self, report: Progress) -> None:
        """Refuse early, with what is missing, on a machine this backend cannot run on."""
        require_gpu(self.name)

    def server_args(self, path: str) -> dict[str, Any]:
        """Keyword arguments of ``sglang.Engine`` (its ServerArgs fields); ``engine_args`` win."""
        return {
            "model_path": path,
            "dtype": self.model_args.infer_dtype,
            "trust_remote_code": self.model_args.trust_remote_code,
            "max_running_requests": self.model_args.max_concurrent,
            **self.model_args.engine_args,
        }

    # ---- prompts

    def _request(self, messages, system, tools, images, videos, audios, generation) -> tuple[ChatRequest, dict[str, Any]]:
        """The checked request, and the sampling settings beyond GenerationArgs (passed to SGLang as they are)."""
        extras = {name: generation.pop(name) for name in self.extra_sampling_params & set(generation)}
        if self._media:
            self._media.check_available(images, videos, audios)
        request = build_request(self.generating_args, self.media_kinds, messages, system, tools, images, videos, audios, **generation)
        return request, extras

    def _prompt(self, request: ChatRequest) -> str:
        messages = self._media.template_messages(request.messages, self._template) if self._media else request.messages
        return render_chat(self.tokenizer, self._template, messages, request.tools, request.generation.enable_thinking)

    def render_prompt(self, messages, system=None, tools=None, **generation) -> str:
        return self._prompt(self._request(messages, system, tools, None, None, None, generation)[0])

    async def _inputs(self, request: ChatRequest) -> dict[str, Any]:
        """What async_generate reads the prompt from. Text-only prompts go as token ids, tokenized
        the way the template meant (no second BOS); with media, SGLang's own processor needs the
        text to expand each media token."""
        prompt = self._prompt(request)
        if not request.media:
            return {"input_ids": self.tokenizer(prompt, add_special_tokens=False).input_ids}
        # Decoding images, video and audio is slow: it runs off the event loop.
        return {"prompt": prompt, **await asyncio.to_thread(self._media_data, request.media)}

    def _media_data(self, media: dict[str, list]) -> dict[str, list]:
        """The files regularised as on every backend (the same size limits and errors), in forms
        SGLang loads: PIL images, sampled frames, and audio as WAV bytes (it reads audio only from
        files and bytes)."""
        settings = self.model_args
        data: dict[str, list] = {}
        if images := media.get("image"):
            data["image_data"] = [load_image(item, describe("image", i, item), settings.image_max_pixels) for i, item in enumerate(images)]
        if videos := media.get("video"):
            data["video_data"] = [
                load_video(item, describe("video", i, item), settings.video_fps, settings.video_max_frames, settings.video_max_pixels).frames
                for i, item in enumerate(videos)
            ]
        if audios := media.get("audio"):
            rate = int(self._media.processor.feature_extractor.sampling_rate)
            data["audio_data"] = [
                _wav_bytes(load_audio(item, describe("audio", i, item), rate, settings.audio_max_seconds), rate)
                for i, item in enumerate(audios)
            ]
        return data

    def _sampling_params(self, args: GenerationArgs, extras: dict[str, Any], index: int) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_new_tokens": args.max_new_tokens,
            "repetition_penalty": args.repetition_penalty,
            "stop": list(args.stop) or None,
            "skip_special_tokens": args.skip_special_tokens,
            **extras,
        }
        if args.greedy:
            params["temperature"] = 0.0
            return params
        params.update(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or -1)
        if args.seed is not None:
            if not self._honours_seeds:
                logger.warning(
                    "SGLang applies per-request seeds only when started with enable_deterministic_inference=true "
                    "(engine_args); this seed is passed on but sampling is not reproducible."
                )
            # Each of n samples gets its own seed, or all n would be the same reply.
            params["sampling_seed"] = args.seed + index
        return params

    # ---- generation

    async def chat(self, messages, system=None, tools=None, images=None, videos=None, audios=None, **generation) -> list[Response]:
        request, extras = self._request(messages, system, tools, images, videos, audios, generation)
        inputs = await self._inputs(request)
        args = request.generation
        # Greedy decoding gives n identical replies; generating them once is the same answer.
        copies, runs = (args.num_return_sequences, 1) if args.greedy else (1, args.num_return_sequences)
        tasks = [asyncio.ensure_future(self._complete(inputs, args, extras, index)) for index in range(runs)]
        try:
            responses = await asyncio.gather(*tasks)
        finally:
            # One failed or cancelled sample stops the others; each aborts its request on the way out.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return [response for response in responses for _ in range(copies)]

    async def _complete(self, inputs: dict[str, Any], args: GenerationArgs, extras: dict[str, Any], index: int) -> Response:
        async with contextlib.aclosing(self._reply(inputs, args, extras, index)) as reply:
            async for item in reply:
                if isinstance(item, Response):
                    return item
        raise ChatError(f"The {self.name} runtime ended the request without a final reply.")

    async def stream_chat(self, messages, system=None, tools=None, images=None, videos=None, audios=None, on_finish=None, **generation) -> AsyncIterator[str]:
        """Streams the first reply only (num_return_sequences is ignored here)."""
        request, extras = self._request(messages, system, tools, images, videos, audios, generation)
        inputs = await self._inputs(request)
        async with contextlib.aclosing(self._reply(inputs, request.generation, extras, 0)) as reply:
            async for item in reply:
                if not isinstance(item, Response):
                    yield item
                elif on_finish is not None:
                    on_finish(item)

    async def _reply(self, inputs: dict[str, Any], args: GenerationArgs, extras: dict[str, Any], index: int) -> AsyncIterator[str | Response]:
        """One request: its text piece by piece, then the whole Response. Leaving early aborts it."""
        rid = f"anychat-{uuid.uuid4().hex}"
        text = _VisibleText(args.stop, self._incremental)
        finished = False
        chunks = None
        try:
            chunks = await self._runtime.async_generate(
                **inputs, sampling_params=self._sampling_params(args, extras, index), stream=True, rid=rid
            )
            async for chunk in chunks:
                meta = chunk["meta_info"]
                reason = meta["finish_reason"]
                piece = text.push(chunk["text"], final=reason is not None)
                if reason is not None:
                    finished = True
                    if reason["type"] == "abort":
                        raise _aborted(reason)
                if piece:
                    yield piece
                if finished:
                    yield Response(
                        response_text=text.shown,
                        response_length=meta["completion_tokens"],
                        prompt_length=meta["prompt_tokens"],
                        finish_reason="length" if reason["type"] == "length" else "stop",
                    )
                    return
        except ChatError:
            raise
        except ValueError as error:
            # SGLang's way of refusing a request: a prompt longer than the context, a sampling value out of range.
            raise ConfigError(f"SGLang refused the request: {error}") from error
        finally:
            if not finished:
                self._runtime.tokenizer_manager.abort_request(rid)
            if chunks is not None:
                await chunks.aclose()

    # ---- scores

    async def get_scores(self, batch_input: list[str], **kwargs: Any) -> list[float]:
        raise UnsupportedError(
            "This model does not produce scores: it is a generative model. "
            f"The {self.name} engine serves generative models only; load reward models on the huggingface backend."
        )

    # ---- lifetime

    async def close(self) -> None:
        runtime, self._runtime, self.model = self._runtime, None, None
        if runtime is not None:
            # shutdown() blocks until the scheduler processes have released the GPU.
            await asyncio.get_running_loop().run_in_executor(None, runtime.shutdown)


def require_gpu(backend: str, found: str = "") -> None:
    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            f"The {backend} backend needs an NVIDIA GPU with CUDA, and this machine has none that torch can see. "
            f"{found}Use the huggingface or vllm backend here, or run on a GPU machine."
        )


@contextlib.contextmanager
def _event_loop_policy_kept() -> Iterator[None]:
    """SGLang's modules install uvloop's event loop policy for the whole process when they are
    imported; the web app and any loop it creates later keep the policy the process had."""
    policy = asyncio.get_event_loop_policy()
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(policy)


def start_runtime(server_args: dict[str, Any], display_name: str) -> Any:
    """Import SGLang and start its Engine on the calling thread's running loop (ChatModel's).

    ``sglang.Engine`` is a lazy attribute: the heavy import happens at the call, so both are
    inside the policy guard. The Engine also switches multiprocessing to spawn for the process;
    that stays, since forking a process that holds a CUDA context is unsafe.
    """
    with _event_loop_policy_kept():
        try:
            import sglang

            engine_type = sglang.Engine
        except ImportError as error:
            raise BackendUnavailableError(
                f"SGLang is installed but cannot be imported here: {error}. It needs its CUDA build of torch "
                "and sglang-kernel: pip install sglang (on an NVIDIA GPU machine)."
            ) from error
        try:
            return engine_type(**server_args)
        except TypeError as error:
            raise ConfigError(
                f"SGLang rejected the engine arguments: {error}. Engine arguments are SGLang's ServerArgs fields "
                "(python -m sglang.launch_server --help lists them, with dashes where the fields have underscores)."
            ) from error
        except ImportError as error:
            raise BackendUnavailableError(f"SGLang could not load a part it needs: {error}") from error
        except Exception as error:  # the runtime fails in many ways (CUDA, memory, weights); each message says why
            raise ModelLoadError(f"SGLang could not start {display_name}: {error}") from error


def _aborted(reason: dict[str, Any]) -> ChatError:
    message = reason.get("message") or "the request was aborted"
    if reason.get("status_code") == 400:
        return ConfigError(f"SGLang refused the request: {message}")
    return ChatError(f"SGLang stopped the request: {message}")


class _VisibleText:
    """The reply as the runtime reports it (all of it so far, or only new text with incremental
    output), given out in pieces that never show the start of a stop string: SGLang cuts a stop
    string off only once it is complete, so its running text can show the first half of one."""

    def __init__(self, stop: tuple[str, ...], incremental: bool) -> None:
        self._stop = stop
        self._incremental = incremental
        self._received = ""
        self.shown = ""

    def push(self, text: str, final: bool) -> str:
        self._received = self._received + text if self._incremental else text
        visible = self._received
        cut = find_stop(visible, self._stop)
        if cut is not None:
            visible = visible[:cut]
        elif not final:
            visible = visible[: len(visible) - _stop_prefix_length(visible, self._stop)]
        if not visible.startswith(self.shown):
            logger.warning("SGLang revised reply text it had already streamed; keeping what was shown.")
            return ""
        piece, self.shown = visible[len(self.shown) :], visible
        return piece


def _stop_prefix_length(text: str, stop: tuple[str, ...]) -> int:
    """Length of the longest end of ``text`` that a stop string starts with."""
    return max((n for s in stop for n in range(1, min(len(s), len(text) + 1)) if text.endswith(s[:n])), default=0)


def _wav_bytes(samples: Any, sample_rate: int) -> bytes:
    """Mono float samples as a 16-bit WAV file."""
    import numpy as np

    pcm = (np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(int(sample_rate))
        out.writeframes(pcm.tobytes())
    return buffer.getvalue()
