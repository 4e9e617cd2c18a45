"""The llama.cpp backend: GGUF files run natively by llama-cpp-python, fast on CPU.

The GGUF file is opened as it is, or with ``convert_weights``, for weights llama.cpp's CPU kernels
are slow on (Q4_1), from a Q8_0 copy converted once (llamacpp_weights.py). Prompts come from the
shared prompt path (the model's own chat template, with the tokenizer read from the same GGUF,
whose ids are llama.cpp's) and reach llama.cpp as token ids. Generation is our own loop over
llama.cpp's low-level API, on one thread that owns the context (llamacpp_batcher.py):

- the context holds ``max_concurrent`` sequences, each with a KV cache of its own, and one more
  for background work (a compaction's summary) where memory allows, which pauses while any other
  request has work, so that it never holds up another chat; every running request is one
  sequence, and one llama_decode a step evaluates a token of each (continuous
  batching: a new request joins at the next step, an ended one frees its sequence at once); a
  prompt is evaluated in steps of its own, taking turns with those, so that how it is cut into
  batches, and so its reply, does not depend on what else runs;
- each sequence's cache keeps its last conversation, so the next turn only evaluates what is
  new; a conversation another one replaces is copied out to the prompt cache (in memory, and on
  disk with ``prompt_cache_dir``) and put back when a prompt continues it
  (llamacpp_prompt_cache.py); a prompt that was evaluated before is evaluated from the same position again, so a
  repeated greedy request gives the same reply, and a seeded request always starts from an
  empty cache;
- sampling is llama.cpp's sampler chain in the order transformers uses (penalties over prompt
  and reply, temperature, top-k, top-p, min-p), one chain per request; a reply format adds
  llama.cpp's grammar sampler beside the chain (llamacpp_grammar.py); where a request asks for
  logprobs, they are read from the raw logits (llama_get_logits_ith) before the chain samples;
- prompts are evaluated in batches with an abort callback, so Stop during a long prefill
  returns within milliseconds; during generation the request stops at the next step;
- text is decoded on the event loop by our IncrementalDecoder (llama-cpp-python's detokenize
  drops tokens longer than 32 bytes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import dataclasses
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil

from ..errors import BackendUnavailableError, ConfigError, MediaError, ModelLoadError
from ..generation_args import GenerationArgs
from ..llamacpp_build import cpu_has_amx
from ..logprobs import RawLogprobs, TokenLogprobs
from ..model_files import Progress, within
from ..model_files.backend_registry import BACKENDS
from ..model_files.gguf import gguf_metadata_dir
from ..model_files.gguf_header import GgufModel
from ..model_files.model_args import ModelArgs
from ..model_files.paths import DEFAULT_MODEL_GENERATION, gguf_file
from ..model_files.projector import Projector, find_projector
from ..prompt.builder import Prompt, PromptBuilder
from ..prompt.text_stream import IncrementalDecoder
from ..prompt_progress import PromptRead
from ..reply_format import ReplyFormat
from ..request import ChatRequest
from .base import BaseEngine, Response
from .grammar_sandbox import compile_bounded
from .llamacpp_batcher import Batcher, Job, StepThreads
from .llamacpp_grammar import gbnf
from .llamacpp_media import MediaEncoder, mtmd
from .llamacpp_prompt_cache import PromptCache, model_key
from .llamacpp_weights import weights_to_read

try:
    import llama_cpp
    from llama_cpp import llama_cpp as lib
except ImportError as error:
    raise BackendUnavailableError(
        f"The llamacpp backend could not be imported ({error}). Install it with: {BACKENDS['llamacpp'].install}."
    ) from error

DEFAULT_BATCH = 512
# A reply format's grammar that llama.cpp parses for each reply it samples; the schema limits
# (engines/reply_format.py) keep real ones far below this.
MAX_GRAMMAR_CHARS = 200_000
# llama.cpp sizes its context in steps of 256 tokens.
CONTEXT_STEP = 256
# The share of free memory the default context's KV cache may take.
KV_CACHE_SHARE = 0.25
# Bytes of one number of the KV cache, f16 as llama.cpp keeps it unless told otherwise.
F16_BYTES = 2
_load_lock = threading.Lock()
logger = logging.getLogger(__name__)
# What llama.cpp logs, as errors, when our abort callback stops an evaluation on purpose.
_ABORT_LOG_LINES = ("failed to compute graph, compute status: 1", "removing memory module entries", "failed to decode, ret = 2",
                    "graph_compute_async failed with error 1")
# ggml's log levels (ggml.h: DEBUG 1, INFO 2, WARN 3, ERROR 4); llama-cpp-python's own table is older.
_LOG_LEVELS = {3: logging.WARNING, 4: logging.ERROR}


class ErrorLines:
    """llama.cpp's and libmtmd's latest error lines, for the messages of what they refuse."""

    def __init__(self) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=50)
        self.count = 0

    def add(self, line: str) -> None:
        self._lines.append(line)
        self.count += 1

    def since(self, count: int) -> str:
        """The lines logged since ``count`` was read, in one line."""
        return " ".join(list(self._lines)[len(self._lines) - min(self.count - count, len(self._lines)):])


error_lines = ErrorLines()


@lib.llama_log_callback
def _log(level: int, text: bytes, user_data: Any) -> None:
    """llama.cpp's warnings and errors into Python's logging, except those a Stop causes."""
    message = text.decode("utf-8", "replace").rstrip()
    if level in _LOG_LEVELS and not any(line in message for line in _ABORT_LOG_LINES):
        logger.log(_LOG_LEVELS[level], "llama.cpp: %s", message)
        if level == 4 and message:
            error_lines.add(message)


lib.llama_log_set(_log, ctypes.c_void_p(0))
if mtmd is not None:
    mtmd.mtmd_helper_log_set(_log, ctypes.c_void_p(0))


class LlamaCppEngine(BaseEngine):
    name = "llamacpp"
    generation_settings = frozenset({"min_p", "presence_penalty", "frequency_penalty", "logprobs"})

    def __init__(self, model_args: ModelArgs, generation: dict[str, Any] | None = None, progress: Progress | None = None) -> None:
        report = progress or (lambda fraction, message: None)
        self.model_args = model_args
        self.model_path = gguf = gguf_file(model_args.model_name_or_path)
        embedded = DEFAULT_MODEL_GENERATION if model_args.model_name_or_path is None else None
        self.shape = GgufModel.read(gguf)
        metadata = gguf_metadata_dir(gguf, within(progress, 0.0, 0.6), embedded)
        self.prompts = PromptBuilder.from_gguf_metadata(str(metadata), model_args, generation, self.shape.context_length)
        projector = find_projector(gguf, model_args.mmproj, self.shape.embedding_width)
        # One more sequence for background work (a compaction's summary), where memory holds its
        # KV cache without shortening the chats' context.
        concurrent = model_args.max_concurrent
        fits = model_args.max_model_len or _fitting_context(self.shape, concurrent + 1) == _fitting_context(self.shape, concurrent)
        self.background_sequences = 1 if fits else 0
        sequences = concurrent + self.background_sequences
        # What Llama() was given, for a reference run with the same settings (bench/).
        self.llama_settings = self._llama_args()
        self.weights_path = weights_to_read(gguf, self.shape, model_args.convert_weights, self.llama_settings["n_gpu_layers"] != 0,
                                            within(progress, 0.6, 0.7))
        report(0.7, f"Opening {gguf.name} with llama.cpp…")
        self.model = open_llama(str(self.weights_path), self.llama_settings, sequences)
        self._media = None
        if projector is not None:
            report(0.9, f"Opening the projector {projector.path.name}…")
            self._media = MediaEncoder(self.model, projector, self.llama_settings["n_threads_batch"],
                                       self.llama_settings["n_gpu_layers"] != 0, error_lines)
            self.prompts.use_media(self._media.prompt_media(model_args, self.tokenizer))
        self._batcher = Batcher(self.model, sequences, self.llama_settings["n_batch"] - sequences, self._media, self._step_threads(),
                                error_lines, self._prompt_cache(str(self.weights_path)), self.background_sequences)
        self.prompts.context_length = self._batcher.n_ctx_sequence

    @property
    def projector(self) -> Projector | None:
        return self._media.projector if self._media else None

    def _llama_args(self) -> dict[str, Any]:
        args = self.model_args
        threads = args.threads or default_threads()
        # A prompt's evaluation does much work between two barriers, so all cores help it.
        prompt_threads = args.threads or psutil.cpu_count(logical=False) or 1
        sequences = args.max_concurrent + self.background_sequences
        context = _whole_steps(args.max_model_len) if args.max_model_len else _fitting_context(self.shape, sequences)
        # Room in one batch for a prompt's batch beside one token of every other sequence.
        batch = (args.batch_size or DEFAULT_BATCH) + sequences
        settings = {
            "n_ctx": context * sequences,
            "n_batch": batch,
            "n_ubatch": batch,
            "n_threads": threads,
            "n_threads_batch": prompt_threads,
            # Every layer on the GPU where this llama.cpp was built for one.
            "n_gpu_layers": args.gpu_layers if args.gpu_layers is not None else -1 if lib.llama_supports_gpu_offload() else 0,
            "verbose": False,
        }
        known = set(inspect.signature(llama_cpp.Llama.__init__).parameters) - {"self", "model_path", "kwargs"}
        unknown = sorted(set(args.engine_args) - known)
        if unknown:
            # Llama(**kwargs) would swallow a misspelt argument without a word.
            raise ConfigError(f"llama.cpp's Llama() takes no argument {', '.join(unknown)}. Its arguments: {', '.join(sorted(known))}.")
        return {**settings, **args.engine_args}

    def _prompt_cache(self, path: str) -> PromptCache | None:
        limit = self.model_args.prompt_cache_bytes
        if limit == 0:
            return None
        folder = Path(self.model_args.prompt_cache_dir).expanduser() if self.model_args.prompt_cache_dir else None
        return PromptCache(self.model.ctx, limit, folder, model_key(path, self.llama_settings))

    @property
    def prompt_cache(self) -> dict[str, int] | None:
        """What the prompt cache holds (None without one)."""
        return self._batcher.saved.summary if self._batcher.saved is not None else None

    @property
    def memory_bytes(self) -> int:
        """The weights (llama_model_size), the KV cache of the context the model was opened with
        (its every sequence, reserved at the start), and the prompt cache's saved states in memory;
        a KV cache of another type than f16 (engine_args type_k/type_v) is counted as f16."""
        shape = self.shape
        kv_cache = self.model.n_ctx() * 2 * shape.layers * shape.kv_heads * shape.head_dim * F16_BYTES
        return lib.llama_model_size(self.model.model) + kv_cache + ((self.prompt_cache or {}).get("memory_bytes", 0))

    def _step_threads(self) -> StepThreads | None:
        """The thread counts each step lowers to the free cores, unless they were set by hand."""
        if self.model_args.threads or {"n_threads", "n_threads_batch"} & set(self.model_args.engine_args):
            return None
        return StepThreads(self.model.ctx, self.llama_settings["n_threads"], self.llama_settings["n_threads_batch"])

    def check(self, request: ChatRequest) -> GenerationArgs:
        for kind in request.media:
            if kind not in self.media_kinds:
                reads = (f"its projector {self.projector.path.name} reads {', '.join(sorted(self.media_kinds))} only"
                         if self._media else "no projector (mmproj*.gguf) was found beside it")
                raise MediaError(
                    f"This model does not accept {kind}s on the llamacpp backend: {reads}. Remove the {kind}s, or load a model "
                    "that reads them (on llama.cpp, a GGUF with its mmproj file beside it, or named with the mmproj setting)."
                )
        return super().check(request)

    def _compile_reply_format(self, reply_format: ReplyFormat) -> bytes:
        grammar = compile_bounded(gbnf, reply_format, what=reply_format.label)
        if len(grammar) > MAX_GRAMMAR_CHARS:
            raise ConfigError(
                f"{reply_format.label} makes a llama.cpp grammar of {len(grammar):,} characters (at most "
                f"{MAX_GRAMMAR_CHARS:,}): make it smaller (fewer optional properties, shorter repetitions)."
            )
        return self._batcher.check_grammar(grammar.encode("utf-8"), reply_format.name)

    # ---- generation

    async def _complete(self, prompt: Prompt, args: GenerationArgs) -> list[Response]:
        """n replies one after the other (the request holds one sequence), each with its own seed."""
        responses = []
        for index in range(args.num_return_sequences):
            seed = None if args.seed is None else args.seed + index
            async with contextlib.aclosing(self._stream(prompt, args.replace(seed=seed, num_return_sequences=1))) as items:
                responses += [item async for item in items if isinstance(item, Response)]
        return responses

    async def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | PromptRead | TokenLogprobs | Response]:
        loop = asyncio.get_running_loop()
        tokens: asyncio.Queue[int | PromptRead | RawLogprobs | BaseException | None] = asyncio.Queue()
        released = loop.create_future()

        def arrive(item: int | PromptRead | RawLogprobs | BaseException | None) -> None:
            tokens.put_nowait(item)
            if item is None:
                released.set_result(None)

        job = Job(prompt.ids, args, threading.Event(), lambda item: loop.call_soon_threadsafe(arrive, item),
                  grammar=self.reply_constraint(prompt.request.reply_format),
                  # Without a sequence of its own, background work came through the line as any request.
                  background=prompt.request.background and self.background_sequences > 0)
        prompt_length = len(prompt.ids)
        if prompt.media:
            chunks = await loop.run_in_executor(None, self._media.chunks, prompt)
            try:
                # The media's own tokens count now that libmtmd has said how many they are.
                args = self.prompts.fit(chunks.length, args)
            except BaseException:
                chunks.free()
                raise
            job = dataclasses.replace(job, prompt=chunks.items, args=args, release=chunks.free)
            prompt_length = chunks.length
        self._batcher.submit(job)
        decoder = IncrementalDecoder(self.tokenizer, args.skip_special_tokens, args.stop)
        text, count, ended, logprobs = "", 0, False, []
        try:
            while (token := await tokens.get()) is not None:
                if isinstance(token, BaseException):
                    raise token
                if isinstance(token, PromptRead):
                    yield token
                    continue
                if isinstance(token, RawLogprobs):
                    logprobs.append(self.logprob_names.named(token))
                    yield logprobs[-1]
                    continue
                count += 1
                ended = self._batcher.is_end(token)
                if piece := decoder.push([token]):
                    text += piece
                    yield piece
                if decoder.stopped:
                    break
            if tail := decoder.flush():
                text += tail
                yield tail
            finish = "length" if count >= args.max_new_tokens and not (ended or decoder.stopped) else "stop"
            yield Response(response_text=text, response_length=count, prompt_length=prompt_length, finish_reason=finish,
                           logprobs=tuple(logprobs) if args.logprobs is not None else None, cached_tokens=job.cached,
                           stop_sequence=decoder.stop_sequence)
        finally:
            job.cancel.set()
            # The sequence is free for the next request only once the batcher has let go of it.
            await asyncio.shield(released)

    def unfinished_requests(self) -> int:
        return self._batcher.unfinished

    # ---- lifetime

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._batcher.close)
        if self._media is not None:
            self._media.close()
        model, self.model = self.model, None
        if model is not None:
            model.close()


def open_llama(path: str, settings: dict[str, Any], sequences: int = 1) -> llama_cpp.Llama:
    """Llama(path) with a context of ``sequences`` sequences, each with a KV cache of its own, and
    llama.cpp's weight-repacking buffers off on CPUs with AMX, where they crashed. Llama() takes
    neither as an argument (it silently ignores them), so llama.cpp's defaults are patched while
    it opens. A cache of its own keeps a sequence's attention summed in the same order whatever
    runs beside it (in one shared cache, its tokens sit among the others' and the sums round
    differently), so a reply is the same alone or in a batch."""
    with (_load_lock, _patched_defaults("llama_model_default_params", use_extra_bufts=not cpu_has_amx()),
          _patched_defaults("llama_context_default_params", n_seq_max=sequences, kv_unified=False)):
        try:
            return llama_cpp.Llama(model_path=path, **settings)
        except (ValueError, RuntimeError) as error:
            raise ModelLoadError(f"llama.cpp could not open {path}: {error}") from error


@contextlib.contextmanager
def _patched_defaults(function: str, **fields: Any) -> Iterator[None]:
    original = getattr(lib, function)

    def patched() -> Any:
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    setattr(lib, function, patched)
    try:
        yield
    finally:
        setattr(lib, function, original)


def default_threads() -> int:
    """Threads to generate with: the physical cores but one. ggml's threads spin at each of a
    step's barriers while they wait for each other, so one thread held up by any other busy
    thread (the page's server, the browser showing the reply) stalls them all: on 2 cores, 2
    threads wrote 19 tok/s beside one busy process, 1 thread 68."""
    return max(1, (psutil.cpu_count(logical=False) or 1) - 1)



def _fitting_context(shape: GgufModel, sequences: int) -> int:
    """Each sequence's context: the model's trained context, or less where the KV cache (f16) of
    all ``sequences`` would take more than a quarter of the free memory."""
    per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * F16_BYTES
    fits = int(psutil.virtual_memory().available * KV_CACHE_SHARE // per_token // sequences)
    trained = shape.context_length or 4096
    return max(CONTEXT_STEP, min(trained, fits) // CONTEXT_STEP * CONTEXT_STEP)


def _whole_steps(tokens: int) -> int:
    return -(-tokens // CONTEXT_STEP) * CONTEXT_STEP
