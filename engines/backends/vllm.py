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
import contextlib
import functools
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailableError, ConfigError, MediaError, ModelLoadError, ModelUnloadedError
from ..generation_args import GenerationArgs
from ..logprobs import RawLogprobs, TokenLogprobs
from ..model_files import Progress, within
from ..model_files.backend_registry import BACKENDS
from ..model_files.model_args import ModelArgs, adapter_name
from ..model_files.paths import resolve_model_path
from ..prompt.builder import Prompt, PromptBuilder
from ..reply_format import ReplyFormat
from .base import BaseEngine, Response
from .vllm_engine_core import keep_beside_its_workers
from .xgrammar_format import XGrammarFormats

try:
    from vllm import AsyncEngineArgs, PoolingParams, SamplingParams
    from vllm.lora.request import LoRARequest
    from vllm.platforms import current_platform
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.exceptions import EngineDeadError
except ImportError as error:
    raise BackendUnavailableError(
        f"The vllm backend could not be imported ({error}). Install it with: {BACKENDS['vllm'].install}."
    ) from error

GIB = 1 << 30
# vLLM's own CPU default (VLLM_CPU_KVCACHE_SPACE): without an explicit size its CPU worker
# reserves gpu_memory_utilization of all RAM, which fails on any machine that is not idle.
CPU_KV_CACHE_GB = 4
# The ranks vLLM's LoRA kernels are built for; an adapter's rank rounds up to the next.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
BASE_MODEL = ""


class VllmEngine(BaseEngine):
    name = "vllm"
    generation_settings = frozenset({"presence_penalty", "frequency_penalty", "min_p", "lora_adapter", "logprobs"})

    def __init__(self, model_args: ModelArgs, generation: dict[str, Any] | None = None, progress: Progress | None = None) -> None:
        report = progress or (lambda fraction, message: None)
        self.model_args = model_args
        # vLLM cannot run a GGUF file on CPU; the converted safetensors directory serves everywhere.
        self.model_path = path = resolve_model_path(model_args.model_name_or_path, within(progress, 0.0, 0.8))
        # Our prompt path shapes the prompt, says which media the model takes and regularises
        # them; vLLM runs its own processing of the media.
        self.prompts = PromptBuilder.from_pretrained(path, model_args, generation)
        self._adapters = {
            adapter_name(adapter): LoRARequest(adapter_name(adapter), index, os.path.expanduser(adapter))
            for index, adapter in enumerate(model_args.lora_adapters, start=1)
        }
        report(0.85, f"Starting vLLM with {model_args.display_name} (about half a minute on CPU)…")
        self.socket_folder = _socket_folder()
        try:
            with _sockets_named_in(self.socket_folder):
                self.model = AsyncLLM.from_engine_args(self._engine_args(path))
        except Exception as error:
            _remove(self.socket_folder)
            if isinstance(error, ConfigError):
                raise
            # vLLM raises plain ValueError/RuntimeError for everything at start.
            raise ModelLoadError(f"vLLM could not start {model_args.display_name}: {error}") from error
        if current_platform.is_cpu():
            for process in engine_processes(self.model):
                keep_beside_its_workers(process.pid)
        self.prompts.context_length = self.model.model_config.max_model_len
        self._formats = XGrammarFormats(self.tokenizer, self.prompts.config.get_text_config().vocab_size)

    def _compile_reply_format(self, reply_format: ReplyFormat) -> str:
        """The schema, once xgrammar (vLLM's own structured-output compiler) has compiled it: a
        schema vLLM would refuse mid-request is refused at the door instead."""
        self._formats.check(reply_format)
        return reply_format.schema_text

    def _engine_args(self, path: str) -> AsyncEngineArgs:
        args = self.model_args
        on_cpu = current_platform.is_cpu()
        settings: dict[str, Any] = {
            "model": path,
            "tokenizer": path,
            "dtype": args.infer_dtype,
            "trust_remote_code": args.trust_remote_code,
            "max_model_len": args.max_model_len,
            "gpu_memory_utilization": args.gpu_memory_utilization or 0.9,
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

    async def _engine_input(self, prompt: Prompt, args: GenerationArgs) -> tuple[Any, GenerationArgs]:
        """The prompt as vLLM's engine takes it (token ids, and with media the files, each media
        token expanded by vLLM's processor), and ``args`` fitted to its length."""
        if not prompt.media:
            return await self._render({"prompt_token_ids": prompt.ids}), args
        try:
            engine_input = await self._render({"prompt_token_ids": prompt.ids, "multi_modal_data": self._multi_modal_data(prompt.media)})
        except ValueError as error:
            raise MediaError(f"vLLM's processor for this model could not use these media: {error}") from error
        return engine_input, self.prompts.fit(len(engine_input["prompt_token_ids"]), args)

    def _multi_modal_data(self, media: dict[str, list]) -> dict[str, list]:
        """The regularised files in the forms vLLM's multi_modal_data takes."""
        data: dict[str, list] = {}
        if images := media.get("image"):
            data["image"] = images
        if videos := media.get("video"):
            data["video"] = [(video.frames, video.metadata) for video in videos]
        if audios := media.get("audio"):
            data["audio"] = [(audio, self.prompts.media.sampling_rate) for audio in audios]
        return data

    def _sampling(self, args: GenerationArgs, kind: RequestOutputKind, reply_format: ReplyFormat | None = None) -> SamplingParams:
        schema = self.reply_constraint(reply_format)
        sampling = {"temperature": 0.0} if args.greedy else {
            "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k, "min_p": args.min_p, "seed": args.seed,
        }
        return SamplingParams(
            n=args.num_return_sequences,
            max_tokens=args.max_new_tokens,
            repetition_penalty=args.repetition_penalty,
            presence_penalty=args.presence_penalty,
            frequency_penalty=args.frequency_penalty,
            stop=list(args.stop) or None,
            skip_special_tokens=args.skip_special_tokens,
            # vLLM's default logprobs are those of the raw logits, as OpenAI's.
            logprobs=args.logprobs,
            output_kind=kind,
            # vLLM keeps notes on these while it serves a request: a new one for each.
            structured_outputs=StructuredOutputsParams(json=schema) if schema else None,
            **sampling,
        )

    async def _render(self, prompt: dict[str, Any]) -> Any:
        [engine_input] = await self.model.renderer.render_cmpl_async([prompt])
        return engine_input

    # ---- generation

    async def _complete(self, prompt: Prompt, args: GenerationArgs) -> list[Response]:
        if args.seed is not None and args.num_return_sequences > 1 and not args.greedy:
            # vLLM hands a request's n replies to its scheduler one by one, so whether they share a
            # step (and so, in bf16 on a CPU, their logits) depends on timing, and a seeded reply
            # changed between two runs. Seeded, each is asked alone, with the seed vLLM gives it
            # (seed + its index): the same replies every time, n times as long.
            replies = []
            for index in range(args.num_return_sequences):
                replies += await self._complete(prompt, args.replace(num_return_sequences=1, seed=args.seed + index))
            return replies
        engine_input, args = await self._engine_input(prompt, args)
        prompt_length = len(engine_input["prompt_token_ids"])
        final = None
        params = self._sampling(args, RequestOutputKind.FINAL_ONLY, prompt.request.reply_format)
        async for output in self._generate(engine_input, params, args.lora_adapter):
            final = output
        return [_response(c.text, len(c.token_ids), prompt_length, c.finish_reason, self._logprobs(c, args), final.num_cached_tokens,
                          c.stop_reason) for c in final.outputs]

    async def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | TokenLogprobs | Response]:
        engine_input, args = await self._engine_input(prompt, args)
        prompt_length = len(engine_input["prompt_token_ids"])
        pieces: list[str] = []
        length = 0
        logprobs: list[TokenLogprobs] | None = None if args.logprobs is None else []
        params = self._sampling(args, RequestOutputKind.DELTA, prompt.request.reply_format)
        # Closed with this stream, so vLLM has aborted the request when closing this returns
        # (left to the garbage collector, the abort came a moment later).
        async with contextlib.aclosing(self._generate(engine_input, params, args.lora_adapter)) as outputs:
            async for output in outputs:
                [completion] = output.outputs
                length += len(completion.token_ids)
                for token in self._logprobs(completion, args) or ():
                    logprobs.append(token)
                    yield token
                if completion.text:
                    pieces.append(completion.text)
                    yield completion.text
                if output.finished:
                    yield _response("".join(pieces), length, prompt_length, completion.finish_reason, logprobs, output.num_cached_tokens,
                                    completion.stop_reason)

    def _logprobs(self, completion: Any, args: GenerationArgs) -> list[TokenLogprobs] | None:
        """The logprobs vLLM gives with ``completion``'s tokens (one mapping of token ids to
        its Logprob per token: the chosen one and the ``args.logprobs`` best by rank), named."""
        if args.logprobs is None:
            return None
        named = []
        for token, ranked in zip(completion.token_ids, completion.logprobs or ()):
            top = sorted((lp.rank, token_id, lp.logprob) for token_id, lp in ranked.items() if lp.rank <= args.logprobs)
            raw = RawLogprobs(token, ranked[token].logprob, tuple((token_id, logprob) for _, token_id, logprob in top))
            named.append(self.logprob_names.named(raw))
        return named

    async def _generate(self, engine_input: Any, params: SamplingParams, adapter_name: str | None):
        """vLLM's outputs for one request; leaving early (a closed stream, a cancelled task)
        aborts the request inside vLLM before this returns."""
        adapter = self._adapter(adapter_name)
        request_id = uuid.uuid4().hex
        outputs = self.model.generate(engine_input, params, request_id, lora_request=adapter)
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

    async def _score(self, batch_input: list[str]) -> list[float]:
        return list(await asyncio.gather(*(self._score_one(text) for text in batch_input)))

    async def _score_one(self, text: str) -> float:
        ids = self.tokenizer(text).input_ids
        # The raw logit, as the HF engine returns it: no sigmoid.
        params = PoolingParams(task="classify", use_activation=False)
        final = None
        try:
            prompt = await self._render({"prompt_token_ids": ids})
            async for output in self.model.encode(prompt, params, uuid.uuid4().hex):
                final = output
        except EngineDeadError as error:
            raise _engine_died() from error
        return float(final.outputs.data[0])

    # ---- lifetime

    @functools.cached_property
    def memory_bytes(self) -> int:
        """The weights, as the size of their safetensors files (vLLM's own process loads them and
        does not say), and the KV cache vLLM reserved at its start: its blocks (as its engine
        reported them) of block-size tokens, each token's keys and values in every layer."""
        config = self.model.vllm_config
        model, parallel, cache = config.model_config, config.parallel_config, config.cache_config
        per_token = 2 * model.get_num_layers(parallel) * model.get_num_kv_heads(parallel) * model.get_head_size() * model.dtype.itemsize
        kv_cache = (cache.num_gpu_blocks or 0) * cache.block_size * per_token * parallel.tensor_parallel_size
        weights = sum(file.stat().st_size for file in Path(self.model_path).glob("*.safetensors"))
        return weights + kv_cache

    def unfinished_requests(self) -> int:
        return 0 if self.model is None else self.model.get_num_unfinished_requests()

    async def close(self) -> None:
        engine, self.model = self.model, None
        if engine is not None:
            try:
                # Joins vLLM's engine process (seconds): off the event loop.
                await asyncio.get_running_loop().run_in_executor(None, _shutdown, engine)
            finally:
                _remove(self.socket_folder)


def _socket_folder() -> str | None:
    """A folder of this engine's own for vLLM's ZeroMQ sockets, which vLLM names in
    VLLM_RPC_BASE_PATH (the temporary folder) and leaves behind when its engine stops (84 a test
    run here); removed with the engine. None where the operator has chosen the place."""
    return None if "VLLM_RPC_BASE_PATH" in os.environ else tempfile.mkdtemp(prefix="anychat-vllm-sockets-")


@contextlib.contextmanager
def _sockets_named_in(folder: str | None) -> Iterator[None]:
    """VLLM_RPC_BASE_PATH set to ``folder`` while vLLM starts: it names its sockets then, here and
    in the engine process it starts (which takes the environment with it). Not left set, so that
    another vLLM started in this process later does not name its sockets in a folder gone by then."""
    if folder is None:
        yield
        return
    os.environ["VLLM_RPC_BASE_PATH"] = folder
    try:
        yield
    finally:
        del os.environ["VLLM_RPC_BASE_PATH"]


def _remove(folder: str | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def engine_processes(engine: AsyncLLM) -> list:
    """The engine processes vLLM started (multiprocessing's Process objects)."""
    resources = getattr(engine.engine_core, "resources", None)
    manager = getattr(resources, "engine_manager", None)
    return list(getattr(manager, "processes", ()))


def _shutdown(engine: AsyncLLM) -> None:
    processes = engine_processes(engine)
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
        "vLLM's engine process stopped (the server log says why), so this model cannot answer until it is loaded "
        "again: press Load in the Settings tab."
    )


def _response(text: str, length: int, prompt_length: int, finish_reason: str | None,
              logprobs: list[TokenLogprobs] | None = None, cached_tokens: int | None = None, stop_reason: int | str | None = None) -> Response:
    return Response(
        response_text=text,
        response_length=length,
        prompt_length=prompt_length,
        finish_reason="length" if finish_reason == "length" else "stop",
        logprobs=None if logprobs is None else tuple(logprobs),
        # vLLM's automatic prefix caching, in whole blocks of the prompt
        cached_tokens=cached_tokens or 0,
        # vLLM's stop_reason: the stop string that ended the reply (a token id where one of stop_token_ids did).
        stop_sequence=stop_reason if isinstance(stop_reason, str) else None,
    )


def _lora_rank(adapters: tuple[str, ...]) -> int:
    ranks = []
    for adapter in adapters:
        with open(os.path.join(os.path.expanduser(adapter), "adapter_config.json"), encoding="utf-8") as f:
            ranks.append(int(json.load(f).get("r", 8)))
    rank = max(ranks)
    if rank > LORA_RANKS[-1]:
        raise ConfigError(f"LoRA rank {rank} is above the largest vLLM supports ({LORA_RANKS[-1]}).")
    return next(r for r in LORA_RANKS if r >= rank)
