"""The llama.cpp backend: GGUF files run natively by llama-cpp-python, fast on CPU.

The GGUF file is opened as it is: no conversion, no dequantized copy. Prompts come from the
shared prompt path (the model's own chat template, with the tokenizer read from the same GGUF,
whose ids are llama.cpp's) and reach llama.cpp as token ids. Generation is our own loop over
llama.cpp's low-level API, on one thread that owns the context (_Batcher):

- the context holds ``max_concurrent`` sequences, each with a KV cache of its own; every running
  request is one sequence, and one llama_decode a step evaluates a token of each (continuous
  batching: a new request joins at the next step, an ended one frees its sequence at once); a
  prompt is evaluated in steps of its own, taking turns with those, so that how it is cut into
  batches, and so its reply, does not depend on what else runs;
- each sequence's cache keeps its last conversation, so the next turn only evaluates what is
  new; a prompt that was evaluated before is evaluated from the same position again, so a
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
import itertools
import logging
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil

from ..errors import BackendUnavailableError, ChatError, ConfigError, MediaError, ModelLoadError
from ..generation_args import GenerationArgs
from ..logprobs import RawLogprobs, TokenLogprobs, log_softmax, top_logprobs
from ..model_files import Progress
from ..model_files.gguf import gguf_metadata_dir
from ..model_files.gguf_header import GgufModel
from ..model_files.model_args import ModelArgs
from ..model_files.paths import DEFAULT_MODEL_GENERATION, gguf_file
from ..model_files.projector import Projector, find_projector
from ..prompt.builder import Prompt, PromptBuilder
from ..prompt.text_stream import IncrementalDecoder
from ..reply_format import ReplyFormat
from ..request import ChatRequest
from .base import BaseEngine, Response
from .free_cores import FreeCores
from .grammar_sandbox import compile_bounded
from .llamacpp_grammar import GrammarSampler, gbnf
from .llamacpp_media import MediaChunk, MediaEncoder, mtmd
from .registry import BACKENDS

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
# llama.cpp's "pick a random seed" value; a seed that lands on it is moved off it.
RANDOM_SEED = 0xFFFFFFFF
_load_lock = threading.Lock()
logger = logging.getLogger(__name__)
# What llama.cpp logs, as errors, when our abort callback stops an evaluation on purpose.
_ABORT_LOG_LINES = ("failed to compute graph, compute status: 1", "removing memory module entries", "failed to decode, ret = 2")
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
        metadata = gguf_metadata_dir(gguf, progress, embedded)
        self.prompts = PromptBuilder.from_gguf_metadata(str(metadata), model_args, generation, self.shape.context_length)
        projector = find_projector(gguf, model_args.mmproj, self.shape.embedding_width)
        report(0.7, f"Opening {gguf.name} with llama.cpp…")
        sequences = model_args.max_concurrent
        # What Llama() was given, for a reference run with the same settings (bench/).
        self.llama_settings = self._llama_args()
        self.model = open_llama(str(gguf), self.llama_settings, sequences)
        self._media = None
        if projector is not None:
            report(0.9, f"Opening the projector {projector.path.name}…")
            self._media = MediaEncoder(self.model, projector, self.llama_settings["n_threads_batch"],
                                       self.llama_settings["n_gpu_layers"] != 0, error_lines)
            self.prompts.use_media(self._media.prompt_media(model_args, self.tokenizer))
        self._batcher = _Batcher(self.model, sequences, self.llama_settings["n_batch"] - sequences, self._media, self._step_threads())
        self.prompts.context_length = self._batcher.n_ctx_sequence

    @property
    def projector(self) -> Projector | None:
        return self._media.projector if self._media else None

    def _llama_args(self) -> dict[str, Any]:
        args = self.model_args
        threads = args.threads or default_threads()
        # A prompt's evaluation does much work between two barriers, so all cores help it.
        prompt_threads = args.threads or psutil.cpu_count(logical=False) or 1
        sequences = args.max_concurrent
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

    def _step_threads(self) -> _StepThreads | None:
        """The thread counts each step lowers to the free cores, unless they were set by hand."""
        if self.model_args.threads or {"n_threads", "n_threads_batch"} & set(self.model_args.engine_args):
            return None
        return _StepThreads(self.model.ctx, self.llama_settings["n_threads"], self.llama_settings["n_threads_batch"])

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

    async def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | TokenLogprobs | Response]:
        loop = asyncio.get_running_loop()
        tokens: asyncio.Queue[int | RawLogprobs | BaseException | None] = asyncio.Queue()
        released = loop.create_future()

        def arrive(item: int | RawLogprobs | BaseException | None) -> None:
            tokens.put_nowait(item)
            if item is None:
                released.set_result(None)

        job = _Job(prompt.ids, args, threading.Event(), lambda item: loop.call_soon_threadsafe(arrive, item),
                   grammar=self.reply_constraint(prompt.request.reply_format))
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
                           logprobs=tuple(logprobs) if args.logprobs is not None else None)
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


@dataclass(eq=False)
class _Job:
    """One reply to generate: handed to the batcher's thread, which hands back its tokens.
    ``prompt``: token ids, and libmtmd's chunks for its media; ``release`` frees those chunks.
    ``grammar``: the GBNF the reply keeps to, if any."""

    prompt: list[int | MediaChunk]
    args: GenerationArgs
    cancel: threading.Event
    hand_over: Callable[[Any], None]
    release: Callable[[], None] = lambda: None
    grammar: bytes | None = None


# What a sequence's cache holds, item by item: a token id, or a media chunk's key.
_Cached = int | tuple


def _cache_keys(prompt: list[int | MediaChunk]) -> list[_Cached]:
    return [item if isinstance(item, int) else item.key for item in prompt]


@dataclass(eq=False)
class _Sequence:
    """One of the context's sequences: what its part of the KV cache holds, and the job it runs."""

    seq_id: int
    cached: list[_Cached] = field(default_factory=list)
    # The position after each cached item (a media chunk may take several).
    ends: list[int] = field(default_factory=list)
    # The last prompt evaluated here and where its evaluation started (see reusable).
    last_prompt: list[_Cached] | None = None
    last_start: int = 0
    job: _Job | None = None
    sampler: Any = None
    grammar: GrammarSampler | None = None
    # What to put into the cache next: the rest of the prompt, then each sampled token.
    pending: list[int | MediaChunk] = field(default_factory=list)
    generated: int = 0
    # When its job arrived: prompts are evaluated first come, first served.
    arrival: int = 0

    @property
    def position(self) -> int:
        return self.ends[-1] if self.ends else 0

    def keep(self, items: int) -> int:
        """Forget all but the first ``items`` cached items; the position after them."""
        del self.cached[items:], self.ends[items:]
        return self.position

    def add(self, item: _Cached, positions: int = 1) -> None:
        self.cached.append(item)
        self.ends.append(self.position + positions)

    def reusable(self, prompt: list[_Cached], fresh: bool) -> int:
        """How many items of ``prompt`` this cache already holds and need not evaluate again."""
        if fresh:
            return 0
        common = 0
        for cached, new in zip(self.cached, prompt):
            if cached != new:
                break
            common += 1
        if common < len(prompt):
            return common
        # The whole prompt is cached, but not the logits of its last token. Evaluating it again
        # from where it started last time repeats that evaluation exactly.
        return self.last_start if prompt == self.last_prompt else 0


class _StepThreads:
    """llama.cpp's two thread counts (for a step of one token, and of more), each lowered before a
    step to the cores the rest of the machine leaves free (free_cores.py): ggml's spinning threads
    made 4 chats at once slower than one beside a busy process."""

    def __init__(self, ctx: Any, generating: int, evaluating: int) -> None:
        self._ctx = ctx
        self._most = (generating, evaluating)
        self._free = FreeCores(max(self._most))
        self.counts = self._most

    def fit(self) -> None:
        free = self._free.count()
        counts = (min(self._most[0], free), min(self._most[1], free))
        if counts != self.counts:
            lib.llama_set_n_threads(self._ctx, *counts)
            self.counts = counts


class _Batcher:
    """llama.cpp's context, owned by one thread that decodes every running sequence together.

    Each step is planned, filled and sampled (_plan, _fill, _sample): one token of every sequence
    that is generating, or the next piece of one prompt, in one batch that one llama_decode
    evaluates; then each sequence whose prompt is done samples from its own logits with its own
    sampler. A job that arrives joins at the next step; one that ends (or is cancelled) frees its
    sequence at once. What a sequence's
    cache holds stays after its job, and the next job goes to the sequence that holds the
    longest start of its prompt."""

    def __init__(self, model: llama_cpp.Llama, sequences: int, prompt_batch: int, media: MediaEncoder | None,
                 threads: _StepThreads | None) -> None:
        self._ctx = model.ctx
        self._media = media
        self._threads = threads
        self._vocab = lib.llama_model_get_vocab(model.model)
        self._memory = lib.llama_get_memory(self._ctx)
        self.n_ctx_sequence = lib.llama_n_ctx_seq(self._ctx)
        self._n_vocab = lib.llama_vocab_n_tokens(self._vocab)
        self._prompt_batch = prompt_batch
        self._prompt_step = False
        self._arrivals = itertools.count()
        self._sequences = [_Sequence(seq_id) for seq_id in range(sequences)]
        self._batch = lib.llama_batch_init(prompt_batch + sequences, 0, 1)
        self._arrived: collections.deque[_Job | None] = collections.deque()
        self._wake = threading.Condition()
        # Jobs submitted and not handed back yet (written under _wake: two threads change it).
        self.unfinished = 0
        # What has been put into the caches so far: text tokens and media chunks (each encoded once).
        self.evaluated = collections.Counter()
        self._thread = threading.Thread(target=self._run, name="llamacpp", daemon=True)
        self._thread.start()

    def is_end(self, token: int) -> bool:
        return bool(lib.llama_vocab_is_eog(self._vocab, token))

    def check_grammar(self, grammar: bytes, name: str) -> bytes:
        """``grammar`` if llama.cpp's grammar sampler takes it, else a ConfigError with its reason."""
        logged = error_lines.count
        sampler = lib.llama_sampler_init_grammar(self._vocab, grammar, b"root")
        if not sampler:
            raise ConfigError(f"llama.cpp cannot use the grammar of the {name} schema: {error_lines.since(logged) or 'no reason given'}.")
        lib.llama_sampler_free(sampler)
        return grammar

    def submit(self, job: _Job) -> None:
        """Start ``job``: its tokens are handed over one by one as they are sampled (where it
        asks for logprobs, each token's RawLogprobs just before it), then None
        (after an error, the error, then None) once its sequence is free again. Setting its
        ``cancel`` ends it within one step, or within milliseconds while its prompt is evaluated."""
        with self._wake:
            self._arrived.append(job)
            self.unfinished += 1
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._arrived.append(None)
            self._wake.notify()
        self._thread.join()
        lib.llama_batch_free(self._batch)

    # ---- the thread

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._arrived and not self._running():
                    self._wake.wait()
                arrived = list(self._arrived)
                self._arrived.clear()
            for job in arrived:
                if job is None:
                    for sequence in self._running():
                        self._end(sequence)
                    return
                self._start(job)
            for sequence in self._running():
                if sequence.job.cancel.is_set():
                    self._end(sequence)
            if self._running():
                self._step()

    def _running(self) -> list[_Sequence]:
        return [sequence for sequence in self._sequences if sequence.job is not None]

    def _start(self, job: _Job) -> None:
        free = [sequence for sequence in self._sequences if sequence.job is None]
        if not free:
            # The waiting line in front admits no more jobs than there are sequences.
            self._hand_back(job, ChatError("llama.cpp has no free sequence for this request; try again."))
            return
        fresh = job.args.seed is not None
        keys = _cache_keys(job.prompt)
        # The sequence whose cache holds the most of this prompt (a seeded job starts from an
        # empty cache), then the lowest: llama.cpp decodes a run of consecutive sequences in one
        # pass, and one pass per run.
        sequence = max(free, key=lambda s: (0 if fresh else s.reusable(keys, False), -s.seq_id))
        start = sequence.reusable(keys, fresh)
        lib.llama_memory_seq_rm(self._memory, sequence.seq_id, sequence.keep(start), -1)
        sequence.last_prompt, sequence.last_start = keys, start
        sequence.job, sequence.pending, sequence.generated, sequence.arrival = job, job.prompt[start:], 0, next(self._arrivals)
        try:
            sequence.sampler = self._sampler([item for item in job.prompt if isinstance(item, int)], job.args)
            if job.grammar is not None:
                sequence.grammar = GrammarSampler(self._vocab, job.grammar, self._n_vocab)
        except BaseException as error:
            self._end(sequence, error)

    def _end(self, sequence: _Sequence, error: BaseException | None = None) -> None:
        job, sequence.job = sequence.job, None
        if sequence.pending and sequence.generated == 0:
            # Its prompt was not evaluated whole, so the next prompt cannot repeat its evaluation.
            sequence.last_prompt = None
        sequence.pending = []
        if sequence.sampler is not None:
            lib.llama_sampler_free(sequence.sampler)
            sequence.sampler = None
        if sequence.grammar is not None:
            sequence.grammar.free()
            sequence.grammar = None
        self._hand_back(job, error)

    def _hand_back(self, job: _Job, error: BaseException | None) -> None:
        """The job's end: its media chunks freed, the error if any, then None; not counted as
        unfinished by the time its stream reads that None."""
        job.release()
        if error is not None:
            job.hand_over(error)
        with self._wake:
            self.unfinished -= 1
        job.hand_over(None)

    def _step(self) -> None:
        """One llama_decode, then a token sampled for each sequence whose prompt is now evaluated
        whole. A media chunk next in a prompt is evaluated first, on its own (libmtmd encodes it,
        then decodes its embeddings)."""
        if self._threads is not None:
            self._threads.fit()
        for sequence in self._running():
            if sequence.pending and isinstance(sequence.pending[0], MediaChunk) and not self._evaluate_media(sequence):
                return
        takes = self._plan()
        if not takes:
            return
        outputs = self._fill(takes)
        with self._abortable(self._prompt_step):
            status = lib.llama_decode(self._ctx, self._batch)
        if status != 0:
            self._failed(status)
            return
        for sequence, take in takes.items():
            for token in sequence.pending[:take]:
                sequence.add(token)
            del sequence.pending[:take]
        self.evaluated["tokens"] += self._batch.n_tokens
        self._sample(outputs)

    def _plan(self) -> dict[_Sequence, int]:
        """What this step evaluates, as tokens per sequence: the next piece of one prompt (the
        first come, up to the prompt batch and its next media chunk), or one token of every
        sequence that is generating, taking turns while both wait. A prompt never shares a step:
        llama.cpp splits a batch over several caches into equal runs per sequence, so a prompt
        beside others would be cut where their lengths fall, and its logits (and so a seeded or
        near-tie reply) would depend on what else ran."""
        running = self._running()
        generating = [sequence for sequence in running if sequence.generated]
        # A prompt whose next item is a media chunk has it evaluated before the step.
        prompts = sorted((s for s in running if not s.generated and s.pending and isinstance(s.pending[0], int)), key=lambda s: s.arrival)
        self._prompt_step = bool(prompts) and not (generating and self._prompt_step)
        if not self._prompt_step:
            return dict.fromkeys(generating, 1)
        first = prompts[0]
        text = next((index for index, item in enumerate(first.pending) if not isinstance(item, int)), len(first.pending))
        return {first: min(self._prompt_batch, text)}

    def _fill(self, takes: dict[_Sequence, int]) -> list[tuple[_Sequence, int]]:
        """The batch for ``takes``, in the order of the sequences' ids (llama.cpp evaluates each run
        of consecutive ids in one pass); the sequences to sample and their logits' places in it."""
        batch, count, outputs = self._batch, 0, []
        for sequence in sorted(takes, key=lambda s: s.seq_id):
            take = takes[sequence]
            for offset, token in enumerate(sequence.pending[:take]):
                batch.token[count] = token
                batch.pos[count] = sequence.position + offset
                batch.n_seq_id[count] = 1
                batch.seq_id[count][0] = sequence.seq_id
                batch.logits[count] = take == len(sequence.pending) and offset == take - 1
                count += 1
            if batch.logits[count - 1]:
                outputs.append((sequence, count - 1))
        batch.n_tokens = count
        return outputs

    def _sample(self, outputs: list[tuple[_Sequence, int]]) -> None:
        """A token for each sequence of ``outputs`` from its logits, by its own sampler (and grammar)."""
        for sequence, index in outputs:
            asked = sequence.job.args.logprobs
            logprobs = None if asked is None else self._logprobs(index)
            if sequence.grammar is not None:
                token = sequence.grammar.sample(sequence.sampler, self._ctx, index)
            else:
                token = lib.llama_sampler_sample(sequence.sampler, self._ctx, index)
            sequence.generated += 1
            if logprobs is not None:
                sequence.job.hand_over(top_logprobs(logprobs, token, asked))
            sequence.job.hand_over(token)
            if self.is_end(token) or sequence.generated == sequence.job.args.max_new_tokens or sequence.job.cancel.is_set():
                self._end(sequence)
            else:
                sequence.pending = [token]

    def _logprobs(self, index: int) -> np.ndarray:
        """The log-softmax of the raw logits of the batch's ``index``-th token."""
        return log_softmax(np.ctypeslib.as_array(lib.llama_get_logits_ith(self._ctx, index), shape=(self._n_vocab,)))

    def _evaluate_media(self, sequence: _Sequence) -> bool:
        """The sequence's next media chunk into its cache; False if that did not happen."""
        chunk = sequence.pending[0]
        with self._abortable(True):
            after = self._media.evaluate(self._ctx, chunk, sequence.position, sequence.seq_id, self._prompt_batch)
        if after is None:
            # Stopped, or failed: what it put into the cache is taken out again.
            lib.llama_memory_seq_rm(self._memory, sequence.seq_id, sequence.position, -1)
            if not sequence.job.cancel.is_set():
                self._end(sequence, ChatError("llama.cpp could not evaluate this medium with the model's projector. The server log may say more."))
            return False
        sequence.add(chunk.key, after - sequence.position)
        del sequence.pending[0]
        self.evaluated["media"] += 1
        return True

    @contextlib.contextmanager
    def _abortable(self, evaluating_prompts: bool) -> Iterator[None]:
        """While prompts are evaluated, llama.cpp stops as soon as one of them is cancelled. The
        callback runs once per graph node, so it is set only then (a long prompt is where Stop
        must not wait); a generation step ends within a token anyway."""
        if not evaluating_prompts:
            yield
            return

        @lib.ggml_abort_callback
        def abort(_: Any) -> bool:
            return any(s.job.cancel.is_set() for s in self._running() if s.generated == 0)

        lib.llama_set_abort_callback(self._ctx, abort, None)
        try:
            yield
        finally:
            lib.llama_set_abort_callback(self._ctx, lib.ggml_abort_callback(), None)

    def _failed(self, status: int) -> None:
        """After a llama_decode that did not run: llama.cpp took the batch's tokens back out of
        the cache, and the step is tried again, unless it cannot succeed."""
        if status == 2:  # cancelled: the cancelled jobs end at the next step
            return
        if status == 1 and self._free_idle_caches():
            return
        error = ChatError(
            "llama.cpp has no room left in its context for all the conversations running at once; try again shortly, "
            "or load the model with a larger max_model_len."
            if status == 1 else f"llama.cpp could not evaluate the prompt (llama_decode returned {status}). The server log may say more."
        )
        # The conversations that have started their replies keep going where they can.
        running = self._running()
        for sequence in [s for s in running if s.generated == 0] or running:
            self._end(sequence, error)

    def _free_idle_caches(self) -> bool:
        """Empty the caches of the sequences no job runs on; False if there were none to empty."""
        idle = [s for s in self._sequences if s.job is None and s.cached]
        for sequence in idle:
            lib.llama_memory_seq_rm(self._memory, sequence.seq_id, 0, -1)
            sequence.keep(0)
            sequence.last_prompt = None
        return bool(idle)

    def _sampler(self, ids: list[int], args: GenerationArgs) -> Any:
        """The sampler chain for ``args``, in transformers' order: penalties (over the prompt too),
        temperature, top-k, top-p, min-p, then the draw."""
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        add = lambda sampler: lib.llama_sampler_chain_add(chain, sampler)  # noqa: E731
        if (args.repetition_penalty, args.presence_penalty, args.frequency_penalty) != (1.0, 0.0, 0.0):
            add(lib.llama_sampler_init_penalties(self._n_vocab, self.n_ctx_sequence, args.repetition_penalty,
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
        return chain


def open_llama(path: str, settings: dict[str, Any], sequences: int = 1) -> llama_cpp.Llama:
    """Llama(path) with a context of ``sequences`` sequences, each with a KV cache of its own, and
    llama.cpp's weight-repacking buffers off on CPUs with AMX, where they crashed. Llama() takes
    neither as an argument (it silently ignores them), so llama.cpp's defaults are patched while
    it opens. A cache of its own keeps a sequence's attention summed in the same order whatever
    runs beside it (in one shared cache, its tokens sit among the others' and the sums round
    differently), so a reply is the same alone or in a batch."""
    with (_load_lock, _patched_defaults("llama_model_default_params", use_extra_bufts=not _cpu_has_amx()),
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


def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return " amx_tile" in f.read()
    except OSError:
        return False


def _fitting_context(shape: GgufModel, sequences: int) -> int:
    """Each sequence's context: the model's trained context, or less where the KV cache (f16) of
    all ``sequences`` would take more than a quarter of the free memory."""
    per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2
    fits = int(psutil.virtual_memory().available * KV_CACHE_SHARE // per_token // sequences)
    trained = shape.context_length or 4096
    return max(CONTEXT_STEP, min(trained, fits) // CONTEXT_STEP * CONTEXT_STEP)


def _whole_steps(tokens: int) -> int:
    return -(-tokens // CONTEXT_STEP) * CONTEXT_STEP
