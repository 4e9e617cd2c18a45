"""The llama.cpp backend: GGUF files run natively by llama-cpp-python, fast on CPU.

The GGUF file is opened as it is: no conversion, no dequantized copy. Prompts come from the
shared prompt path (the model's own chat template, with the tokenizer read from the same GGUF,
whose ids are llama.cpp's) and reach llama.cpp as token ids. Generation is our own loop over
llama.cpp's low-level API on one worker thread:

- one context serves one request at a time; the others wait on the event loop, in order;
- the KV cache keeps the last conversation, so the next turn only evaluates what is new; a
  prompt that was evaluated before is evaluated from the same position again, so a repeated
  greedy request gives the same reply, and a seeded request always starts from an empty cache;
- sampling is llama.cpp's sampler chain in the order transformers uses (penalties over prompt
  and reply, temperature, top-k, top-p, min-p);
- the prompt is evaluated in batches with an abort callback, so Stop during a long prefill
  returns within milliseconds; during generation the loop stops at the next token;
- text is decoded on the event loop by our IncrementalDecoder (llama-cpp-python's detokenize
  drops tokens longer than 32 bytes).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import logging
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil

from ..errors import BackendUnavailableError, ChatError, ConfigError, MediaError, ModelLoadError, UnsupportedError
from ..generation_args import GenerationArgs
from ..model_files import Progress
from ..model_files.gguf import gguf_metadata_dir
from ..model_files.model_args import ModelArgs
from ..model_files.paths import DEFAULT_MODEL_GENERATION, gguf_file
from ..prompt.builder import Prompt, PromptBuilder
from ..prompt.text_stream import IncrementalDecoder
from ..request import ChatRequest
from .base import BaseEngine, Response
from .registry import BACKENDS

try:
    import llama_cpp
    from llama_cpp import llama_cpp as lib
except ImportError as error:
    raise BackendUnavailableError(
        f"The llamacpp backend could not be imported ({error}). Install it with: {BACKENDS['llamacpp'].install}."
    ) from error

DEFAULT_BATCH = 512
# llama.cpp sizes its context in steps of 256 tokens.
CONTEXT_STEP = 256
# The share of free memory the default context's KV cache may take.
KV_CACHE_SHARE = 0.25
# llama.cpp's "pick a random seed" value; a seed that lands on it is moved off it.
RANDOM_SEED = 0xFFFFFFFF
_load_lock = threading.Lock()
logger = logging.getLogger(__name__)
# What llama.cpp logs, as errors, when our abort callback stops an evaluation on purpose.
_ABORT_LOG_LINES = ("failed to compute graph, compute status: 1", "removing memory module entries", "failed to decode, ret = 2")
# ggml's log levels (ggml.h: DEBUG 1, INFO 2, WARN 3, ERROR 4); llama-cpp-python's own table is older.
_LOG_LEVELS = {3: logging.WARNING, 4: logging.ERROR}


@lib.llama_log_callback
def _log(level: int, text: bytes, user_data: Any) -> None:
    """llama.cpp's warnings and errors into Python's logging, except those a Stop causes."""
    message = text.decode("utf-8", "replace").rstrip()
    if level in _LOG_LEVELS and not any(line in message for line in _ABORT_LOG_LINES):
        logger.log(_LOG_LEVELS[level], "llama.cpp: %s", message)


lib.llama_log_set(_log, ctypes.c_void_p(0))


class LlamaCppEngine(BaseEngine):
    name = "llamacpp"
    generation_settings = frozenset({"min_p", "presence_penalty", "frequency_penalty"})

    def __init__(self, model_args: ModelArgs, generation: dict[str, Any] | None = None, progress: Progress | None = None) -> None:
        report = progress or (lambda fraction, message: None)
        self.model_args = model_args
        if model_args.max_concurrent != 1:
            raise ConfigError(
                f"The llamacpp backend answers one request at a time (others wait their turn), so max_concurrent "
                f"must be 1, not {model_args.max_concurrent}. For many users at once, use the vllm backend."
            )
        self.model_path = gguf = gguf_file(model_args.model_name_or_path)
        embedded = DEFAULT_MODEL_GENERATION if model_args.model_name_or_path is None else None
        metadata = gguf_metadata_dir(gguf, progress, embedded)
        self.prompts = PromptBuilder.from_pretrained(str(metadata), model_args, generation, with_media=False)
        if not self.can_generate:
            raise UnsupportedError(
                f"{model_args.display_name} is a reward model; the llamacpp engine serves generative models only. "
                "Load reward models on the huggingface or vllm backend."
            )
        report(0.7, f"Opening {gguf.name} with llama.cpp…")
        self.model = _open(str(gguf), self._llama_args())
        self._generator = _Generator(self.model)
        self.prompts.context_length = self._generator.n_ctx
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="llamacpp")

    def _llama_args(self) -> dict[str, Any]:
        args = self.model_args
        threads = args.threads or psutil.cpu_count(logical=False) or 1
        settings = {
            "n_ctx": _whole_steps(args.max_model_len) if args.max_model_len else _fitting_context(self.prompts.config),
            "n_batch": args.batch_size or DEFAULT_BATCH,
            "n_threads": threads,
            "n_threads_batch": threads,
            "n_gpu_layers": args.gpu_layers or 0,
            "verbose": False,
        }
        known = set(inspect.signature(llama_cpp.Llama.__init__).parameters) - {"self", "model_path", "kwargs"}
        unknown = sorted(set(args.engine_args) - known)
        if unknown:
            # Llama(**kwargs) would swallow a misspelt argument without a word.
            raise ConfigError(f"llama.cpp's Llama() takes no argument {', '.join(unknown)}. Its arguments: {', '.join(sorted(known))}.")
        return {**settings, **args.engine_args}

    def check(self, request: ChatRequest) -> GenerationArgs:
        for kind in request.media:
            raise MediaError(
                f"This model does not accept {kind}s on the llamacpp backend, which reads text only here. "
                "Remove them, or load the model's HF directory on the huggingface or vllm backend for media."
            )
        return super().check(request)

    # ---- generation

    async def _complete(self, prompt: Prompt, args: GenerationArgs) -> list[Response]:
        """n replies one after the other (one context serves one request), each with its own seed."""
        responses = []
        for index in range(args.num_return_sequences):
            seed = None if args.seed is None else args.seed + index
            async with contextlib.aclosing(self._stream(prompt, args.replace(seed=seed, num_return_sequences=1))) as items:
                responses += [item async for item in items if isinstance(item, Response)]
        return responses

    async def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | Response]:
        cancel = threading.Event()
        tokens: asyncio.Queue[int | BaseException | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        hand_over = lambda item: loop.call_soon_threadsafe(tokens.put_nowait, item)  # noqa: E731
        worker = loop.run_in_executor(self._executor, self._generator.run, prompt.ids, args, cancel, hand_over)
        decoder = IncrementalDecoder(self.tokenizer, args.skip_special_tokens, args.stop)
        text, count, ended = "", 0, False
        try:
            while (token := await tokens.get()) is not None:
                if isinstance(token, BaseException):
                    raise token
                count += 1
                ended = self._generator.is_end(token)
                if piece := decoder.push([token]):
                    text += piece
                    yield piece
                if decoder.stopped:
                    break
            if tail := decoder.flush():
                text += tail
                yield tail
            finish = "length" if count >= args.max_new_tokens and not (ended or decoder.stopped) else "stop"
            yield Response(response_text=text, response_length=count, prompt_length=len(prompt.ids), finish_reason=finish)
        finally:
            cancel.set()
            # The context is free for the next request only once the worker has let go of it.
            await asyncio.shield(worker)

    # ---- lifetime

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        model, self.model = self.model, None
        if model is not None:
            model.close()


class _Generator:
    """llama.cpp's context, driven token by token from the worker thread (and only there)."""

    def __init__(self, model: llama_cpp.Llama) -> None:
        self._ctx = model.ctx
        self._vocab = lib.llama_model_get_vocab(model.model)
        self._memory = lib.llama_get_memory(self._ctx)
        self.n_ctx = lib.llama_n_ctx(self._ctx)
        self._n_batch = lib.llama_n_batch(self._ctx)
        self._n_vocab = lib.llama_vocab_n_tokens(self._vocab)
        # What the KV cache holds, and where the last prompt's evaluation started.
        self._cached: list[int] = []
        self._last_prompt: list[int] | None = None
        self._last_start = 0

    def is_end(self, token: int) -> bool:
        return bool(lib.llama_vocab_is_eog(self._vocab, token))

    def run(self, ids: list[int], args: GenerationArgs, cancel: threading.Event, hand_over: Callable[[Any], None]) -> None:
        """Generate the reply to ``ids``, handing each token over as it is sampled, then None (or
        the error). ``cancel`` stops the work within one token, or within milliseconds while the
        prompt is being evaluated."""
        try:
            with self._sampler(ids, args) as sampler:
                if not self._evaluate(ids, fresh=args.seed is not None, cancel=cancel):
                    return
                one = (lib.llama_token * 1)()
                for count in range(1, args.max_new_tokens + 1):
                    token = lib.llama_sampler_sample(sampler, self._ctx, -1)
                    hand_over(token)
                    if self.is_end(token) or count == args.max_new_tokens or cancel.is_set():
                        return
                    one[0] = token
                    self._decode(one, 1)
                    self._cached.append(token)
        except BaseException as error:  # handed to the event loop, which raises it in the request's task
            hand_over(error)
        finally:
            hand_over(None)

    @contextlib.contextmanager
    def _sampler(self, ids: list[int], args: GenerationArgs) -> Iterator[Any]:
        """The sampler chain for ``args``, in transformers' order: penalties (over the prompt too),
        temperature, top-k, top-p, min-p, then the draw."""
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        add = lambda sampler: lib.llama_sampler_chain_add(chain, sampler)  # noqa: E731
        try:
            if (args.repetition_penalty, args.presence_penalty, args.frequency_penalty) != (1.0, 0.0, 0.0):
                add(lib.llama_sampler_init_penalties(self._n_vocab, self.n_ctx, args.repetition_penalty,
                                                     args.frequency_penalty, args.presence_penalty))
                for token in ids:
                    lib.llama_sampler_accept(chain, token)
            if args.greedy:
                add(lib.llama_sampler_init_greedy())
            else:
                add(lib.llama_sampler_init_temp(args.temperature))
                if args.top_k > 0:
                    add(lib.llama_sampler_init_top_k(args.top_k))
                if args.top_p < 1.0:
                    add(lib.llama_sampler_init_top_p(args.top_p, 1))
                if args.min_p > 0.0:
                    add(lib.llama_sampler_init_min_p(args.min_p, 1))
                seed = secrets.randbits(32) if args.seed is None else args.seed % 2**32
                add(lib.llama_sampler_init_dist(seed if seed != RANDOM_SEED else 0))
            yield chain
        finally:
            lib.llama_sampler_free(chain)

    def _evaluate(self, ids: list[int], fresh: bool, cancel: threading.Event) -> bool:
        """Evaluate the part of the prompt the cache does not hold, in batches; False if cancelled."""
        start = self._reusable(ids, fresh)
        lib.llama_memory_seq_rm(self._memory, 0, start, -1)
        self._cached = self._cached[:start]
        self._last_prompt, self._last_start = None, start

        @lib.ggml_abort_callback
        def abort(_: Any) -> bool:
            return cancel.is_set()

        # The callback runs once per graph node: only while the prompt is evaluated, not per token.
        lib.llama_set_abort_callback(self._ctx, abort, None)
        try:
            for begin in range(start, len(ids), self._n_batch):
                chunk = ids[begin: begin + self._n_batch]
                if not self._decode((lib.llama_token * len(chunk))(*chunk), len(chunk)):
                    self._cached = ids[: lib.llama_memory_seq_pos_max(self._memory, 0) + 1]
                    return False
                self._cached += chunk
        finally:
            lib.llama_set_abort_callback(self._ctx, lib.ggml_abort_callback(), None)
        self._last_prompt = ids
        return True

    def _reusable(self, ids: list[int], fresh: bool) -> int:
        """How much of the prompt the cache already holds and need not be evaluated again."""
        if fresh:
            return 0
        common = 0
        for cached, new in zip(self._cached, ids):
            if cached != new:
                break
            common += 1
        if common < len(ids):
            return common
        # The whole prompt is cached, but not the logits of its last token. Evaluating it again
        # from where it started last time repeats that evaluation exactly.
        return self._last_start if ids == self._last_prompt else 0

    def _decode(self, tokens: Any, count: int) -> bool:
        """False if the abort callback stopped it."""
        status = lib.llama_decode(self._ctx, lib.llama_batch_get_one(tokens, count))
        if status == 2:
            return False
        if status != 0:
            raise ChatError(f"llama.cpp could not evaluate the prompt (llama_decode returned {status}). The server log may say more.")
        return True


def _open(path: str, settings: dict[str, Any]) -> llama_cpp.Llama:
    """Llama(path), with llama.cpp's weight-repacking buffers off on CPUs with AMX, where they
    crashed (Llama() silently ignores that setting as an argument, so its defaults are patched)."""
    with _load_lock, _model_defaults(use_extra_bufts=not _cpu_has_amx()):
        try:
            return llama_cpp.Llama(model_path=path, **settings)
        except (ValueError, RuntimeError) as error:
            raise ModelLoadError(f"llama.cpp could not open {path}: {error}") from error


@contextlib.contextmanager
def _model_defaults(**fields: Any) -> Iterator[None]:
    original = lib.llama_model_default_params

    def patched() -> Any:
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    lib.llama_model_default_params = patched
    try:
        yield
    finally:
        lib.llama_model_default_params = original


def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return " amx_tile" in f.read()
    except OSError:
        return False


def _fitting_context(config: Any) -> int:
    """The model's trained context, or less where its KV cache (f16) would take more than a
    quarter of the free memory."""
    text = config.get_text_config()
    trained = getattr(text, "max_position_embeddings", None) or 4096
    heads = getattr(text, "num_attention_heads", 1)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    per_token = 2 * text.num_hidden_layers * getattr(text, "num_key_value_heads", heads) * head_dim * 2
    fits = int(psutil.virtual_memory().available * KV_CACHE_SHARE // per_token)
    return max(CONTEXT_STEP, min(trained, fits) // CONTEXT_STEP * CONTEXT_STEP)


def _whole_steps(tokens: int) -> int:
    return -(-tokens // CONTEXT_STEP) * CONTEXT_STEP
