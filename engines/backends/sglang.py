"""The SGLang backend: SGLang's in-process Engine, driven from ChatModel's event loop.

SGLang needs an NVIDIA GPU: its PyPI wheels carry only CUDA kernels. ``sglang.Engine`` starts
the scheduler and detokenizer in subprocesses and keeps its tokenizer manager on the event loop
it is created on, which is ChatModel's; replies stream from there with ``async_generate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ..errors import BackendUnavailableError, ChatError, ConfigError, ModelLoadError, UnsupportedError
from ..generation_args import GenerationArgs
from ..model_files import Progress
from ..model_files.model_args import ModelArgs, adapter_name
from ..model_files.paths import resolve_model_path
from ..prompt.builder import Prompt, PromptBuilder
from ..prompt.media import wav_bytes
from ..prompt.text_stream import find_stop, partial_suffix_length
from ..reply_format import ReplyFormat
from .base import BaseEngine, Response
from .xgrammar_format import XGrammarFormats

logger = logging.getLogger(__name__)


class SGLangEngine(BaseEngine):
    name = "sglang"
    generation_settings = frozenset({"presence_penalty", "frequency_penalty", "min_p", "lora_adapter"})
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
        # Our prompt path shapes the prompt (each placeholder as the template wants it), says which
        # media the model takes and regularises them; SGLang runs the model's processor on them.
        self.prompts = PromptBuilder.from_pretrained(path, model_args, generation)
        if not self.can_generate:
            raise UnsupportedError(
                f"{model_args.display_name} is a reward model; the {self.name} engine serves generative "
                "models only. Load reward models on the huggingface or vllm backend."
            )
        server_args = self.server_args(path)
        self._incremental = bool(server_args.get(self.incremental_output_arg))
        self._honours_seeds = bool(server_args.get("enable_deterministic_inference"))
        self._adapters = {adapter_name(adapter) for adapter in model_args.lora_adapters}
        report(0.3, f"Starting {self.name} with {model_args.display_name} (weights, KV cache, CUDA graphs: this takes minutes)…")
        self.model = self._runtime = start_runtime(server_args, model_args.display_name)
        self._formats = XGrammarFormats(self.tokenizer, self.prompts.config.get_text_config().vocab_size)
        report(1.0, f"{self.name} is serving {model_args.display_name}.")

    def _compile_reply_format(self, reply_format: ReplyFormat) -> str:
        """The schema for SamplingParams' json_schema, once xgrammar (SGLang's default grammar
        backend) has compiled it, so a schema SGLang would refuse mid-request is refused at the door."""
        self._formats.check(reply_format)
        return reply_format.schema_text

    def check_machine(self, report: Progress) -> None:
        """Refuse early, with what is missing, on a machine this backend cannot run on."""
        require_gpu(self.name)

    def server_args(self, path: str) -> dict[str, Any]:
        """Keyword arguments of ``sglang.Engine`` (its ServerArgs fields): our serving settings
        under SGLang's names, then ``engine_args``, which win."""
        args = self.model_args
        lora = {"enable_lora": True, "lora_paths": [f"{adapter_name(a)}={a}" for a in args.lora_adapters]} if args.lora_adapters else {}
        mapped = {
            "context_length": args.max_model_len,
            "mem_fraction_static": args.gpu_memory_utilization,
            "tp_size": args.tensor_parallel_size,
            "disable_cuda_graph": args.enforce_eager,
        }
        return {
            "model_path": path,
            "dtype": args.infer_dtype,
            "trust_remote_code": args.trust_remote_code,
            "max_running_requests": args.max_concurrent,
            **{name: value for name, value in mapped.items() if value is not None},
            **lora,
            **args.engine_args,
        }

    def _inputs(self, prompt: Prompt) -> dict[str, Any]:
        """What async_generate reads the prompt from. Text-only prompts go as token ids; with
        media, SGLang's own processor needs the text to expand each media token, and the
        regularised files: PIL images, sampled frames, and audio as WAV bytes (it reads audio
        only from files and bytes)."""
        if not prompt.media:
            return {"input_ids": prompt.ids}
        inputs: dict[str, Any] = {"prompt": prompt.text}
        if images := prompt.media.get("image"):
            inputs["image_data"] = images
        if videos := prompt.media.get("video"):
            inputs["video_data"] = [video.frames for video in videos]
        if audios := prompt.media.get("audio"):
            rate = self.prompts.media.sampling_rate
            inputs["audio_data"] = [wav_bytes(audio, rate) for audio in audios]
        return inputs

    def _sampling_params(self, args: GenerationArgs, index: int, reply_format: ReplyFormat | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_new_tokens": args.max_new_tokens,
            "repetition_penalty": args.repetition_penalty,
            "presence_penalty": args.presence_penalty,
            "frequency_penalty": args.frequency_penalty,
            "min_p": args.min_p,
            "stop": list(args.stop) or None,
            "skip_special_tokens": args.skip_special_tokens,
        }
        if reply_format is not None:
            params["json_schema"] = self.reply_constraint(reply_format)
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

    def _lora_path(self, name: str | None) -> dict[str, Any]:
        """None picks the first adapter the model was loaded with; "" the base model."""
        if name is None:
            name = next(iter(self._adapters), "")
        if name and name not in self._adapters:
            raise ConfigError(f"No LoRA adapter named {name!r} is loaded (loaded: {', '.join(self._adapters) or 'none'}); use \"\" for the base model.")
        return {"lora_path": name} if name else {}

    # ---- generation

    async def _complete(self, prompt: Prompt, args: GenerationArgs) -> list[Response]:
        tasks = [asyncio.ensure_future(self._reply_of(prompt, args, index)) for index in range(args.num_return_sequences)]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            # One failed or cancelled sample stops the others; each aborts its request on the way out.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _reply_of(self, prompt: Prompt, args: GenerationArgs, index: int) -> Response:
        async with contextlib.aclosing(self._request(prompt, args, index)) as reply:
            async for item in reply:
                if isinstance(item, Response):
                    return item
        raise ChatError(f"The {self.name} runtime ended the request without a final reply.")

    def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | Response]:
        return self._request(prompt, args, 0)

    async def _request(self, prompt: Prompt, args: GenerationArgs, index: int) -> AsyncIterator[str | Response]:
        """One request: its text piece by piece, then the whole Response. Leaving early aborts it."""
        rid = f"anychat-{uuid.uuid4().hex}"
        text = _VisibleText(args.stop, self._incremental)
        finished = False
        chunks = None
        try:
            chunks = await self._runtime.async_generate(
                **self._inputs(prompt), **self._lora_path(args.lora_adapter),
                sampling_params=self._sampling_params(args, index, prompt.request.reply_format), stream=True, rid=rid,
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

    def unfinished_requests(self) -> int:
        # SGLang's tokenizer manager holds each request's state until the request has ended.
        return 0 if self._runtime is None else len(self._runtime.tokenizer_manager.rid_to_state)

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
        stopped = find_stop(visible, self._stop)
        if stopped is not None:
            visible = visible[:stopped[0]]
        elif not final and self._stop:
            visible = visible[: len(visible) - partial_suffix_length(visible, self._stop)]
        if not visible.startswith(self.shown):
            logger.warning("SGLang revised reply text it had already streamed; keeping what was shown.")
            return ""
        piece, self.shown = visible[len(self.shown) :], visible
        return piece
