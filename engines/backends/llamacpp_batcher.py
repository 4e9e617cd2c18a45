"""The llama.cpp backend's batcher: one thread that owns llama.cpp's context and decodes every
running request together, one sequence of the context each (continuous batching).

Each step is planned (one token of every generating sequence, or the next piece of one prompt),
filled into one llama_batch, evaluated by one llama_decode, and sampled, each sequence by its own
sampler chain and grammar. A sequence's KV cache keeps its last conversation for the next turn;
one that another conversation replaces is kept in the prompt cache (llamacpp_prompt_cache.py),
from which a later prompt that continues it is put back.
The engine (llamacpp.py) submits a Job and reads back its tokens; nothing here knows of text.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp as lib

from ..errors import ChatError, ConfigError
from ..generation_args import GenerationArgs
from ..logprobs import log_softmax, top_logprobs
from ..prompt_progress import PromptRead
from .free_cores import FreeCores
from .llamacpp_grammar import GrammarSampler
from .llamacpp_media import MediaChunk, MediaEncoder
from .llamacpp_prompt_cache import MIN_ITEMS, PromptCache

logger = logging.getLogger(__name__)

# llama.cpp's "pick a random seed" value; a seed that lands on it is moved off it.
RANDOM_SEED = 0xFFFFFFFF


@dataclass(eq=False)
class Job:
    """One reply to generate: handed to the batcher's thread, which hands back its tokens.
    ``prompt``: token ids, and libmtmd's chunks for its media; ``release`` frees those chunks.
    ``grammar``: the GBNF the reply keeps to, if any. ``background``: work that waits while any other
    job has work (a compaction's summary), so that it holds none of them up by more than a step."""

    prompt: list[int | MediaChunk]
    args: GenerationArgs
    cancel: threading.Event
    hand_over: Callable[[Any], None]
    release: Callable[[], None] = lambda: None
    grammar: bytes | None = None
    background: bool = False
    # Set as it starts: the prompt's positions its sequence's cache held already.
    cached: int = 0


# What a sequence's cache holds, item by item: a token id, or a media chunk's key.
_Cached = int | tuple


def _positions(item: int | MediaChunk) -> int:
    return 1 if isinstance(item, int) else item.n_pos


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
    job: Job | None = None
    sampler: Any = None
    grammar: GrammarSampler | None = None
    # What to put into the cache next: the rest of the prompt, then each sampled token.
    pending: list[int | MediaChunk] = field(default_factory=list)
    generated: int = 0
    # When its job arrived: prompts are evaluated first come, first served.
    arrival: int = 0
    # What its prompt takes in the cache (its job says the part of it already there), and when it began.
    prompt_positions: int = 0
    started: float = 0.0

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


class StepThreads:
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


class Batcher:
    """llama.cpp's context, owned by one thread that decodes every running sequence together.

    Each step is planned, filled and sampled (_plan, _fill, _sample): one token of every sequence
    that is generating, or the next piece of one prompt, in one batch that one llama_decode
    evaluates; then each sequence whose prompt is done samples from its own logits with its own
    sampler. A job that arrives joins at the next step; one that ends (or is cancelled) frees its
    sequence at once. What a sequence's
    cache holds stays after its job, and the next job goes to the sequence that holds the
    longest start of its prompt. Background jobs (a compaction's summary) have steps only where no
    other job has work, and a background prompt's step stops as soon as another job arrives."""

    def __init__(self, model: llama_cpp.Llama, sequences: int, prompt_batch: int, media: MediaEncoder | None,
                 threads: StepThreads | None, errors: Any, saved: PromptCache | None = None, background: int = 0) -> None:
        self._ctx = model.ctx
        self.saved = saved
        self._media = media
        self._threads = threads
        # llama.cpp's latest error lines (llamacpp.py's ErrorLines), which say why it refused a grammar.
        self._errors = errors
        self._vocab = lib.llama_model_get_vocab(model.model)
        self._memory = lib.llama_get_memory(self._ctx)
        self.n_ctx_sequence = lib.llama_n_ctx_seq(self._ctx)
        self._n_vocab = lib.llama_vocab_n_tokens(self._vocab)
        self._prompt_batch = prompt_batch
        self._prompt_step = False
        self._arrivals = itertools.count()
        self._sequences = [_Sequence(seq_id) for seq_id in range(sequences)]
        # The last ``background`` sequences are background work's own, so it never takes the
        # place of a conversation another chat goes on with.
        self._foreground = sequences - background
        self._batch = lib.llama_batch_init(prompt_batch + sequences, 0, 1)
        self._arrived: collections.deque[Job | None] = collections.deque()
        self._wake = threading.Condition()
        # Set when a job that is not background work arrives: a background prompt's step stops for it.
        self._arrived_ahead = threading.Event()
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
        logged = self._errors.count
        sampler = lib.llama_sampler_init_grammar(self._vocab, grammar, b"root")
        if not sampler:
            raise ConfigError(f"llama.cpp cannot use the grammar of the {name} schema: {self._errors.since(logged) or 'no reason given'}.")
        lib.llama_sampler_free(sampler)
        return grammar

    def submit(self, job: Job) -> None:
        """Start ``job``: its tokens are handed over one by one as they are sampled (where it
        asks for logprobs, each token's RawLogprobs just before it), then None
        (after an error, the error, then None) once its sequence is free again. Setting its
        ``cancel`` ends it within one step, or within milliseconds while its prompt is evaluated."""
        with self._wake:
            self._arrived.append(job)
            self.unfinished += 1
            if not job.background:
                self._arrived_ahead.set()
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._arrived.append(None)
            self._wake.notify()
        self._thread.join()
        if self.saved is not None and self.saved.persistent:
            # Kept on disk, the conversations the sequences hold outlive the restart too.
            for sequence in self._sequences:
                self._keep_aside(sequence)
        lib.llama_batch_free(self._batch)

    # ---- the thread

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._arrived and not self._running():
                    self._wake.wait()
                arrived = list(self._arrived)
                self._arrived.clear()
                self._arrived_ahead.clear()
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

    def _stepping(self) -> list[_Sequence]:
        """The running sequences this step is for: background work only where nothing else runs."""
        running = self._running()
        return [sequence for sequence in running if not sequence.job.background] or running

    def _giving_way(self, job: Job) -> bool:
        """Whether ``job`` is background work that another job has just arrived ahead of."""
        return job.background and self._arrived_ahead.is_set()

    def _start(self, job: Job) -> None:
        pool = self._sequences[self._foreground:] if job.background else self._sequences[:self._foreground]
        free = [sequence for sequence in pool if sequence.job is None]
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
        if not fresh and self.saved is not None:
            try:
                start = self._restore_saved(sequence, keys, start)
            except (OSError, ValueError, MemoryError) as error:
                # The cache only saves time: without it the prompt is read as it would have been.
                logger.warning("The prompt cache failed (%s); the prompt is read whole.", error)
                lib.llama_memory_seq_rm(self._memory, sequence.seq_id, 0, -1)
                sequence.keep(0)
                sequence.last_prompt = None
                start = 0
        lib.llama_memory_seq_rm(self._memory, sequence.seq_id, sequence.keep(start), -1)
        sequence.last_prompt, sequence.last_start = keys, start
        sequence.job, sequence.pending, sequence.generated, sequence.arrival = job, job.prompt[start:], 0, next(self._arrivals)
        job.cached, sequence.started = sequence.position, time.monotonic()
        sequence.prompt_positions = sequence.position + sum(_positions(item) for item in sequence.pending)
        try:
            sequence.sampler = self._sampler([item for item in job.prompt if isinstance(item, int)], job.args)
            if job.grammar is not None:
                sequence.grammar = GrammarSampler(self._vocab, job.grammar, self._n_vocab)
        except BaseException as error:
            self._end(sequence, error)

    def _restore_saved(self, sequence: _Sequence, keys: list[_Cached], start: int) -> int:
        """Where the prompt cache holds more of the prompt than ``sequence`` does, that state put
        into it, what it held kept first; how many items of the prompt it holds now."""
        found = self.saved.best(keys)
        if found is None or found[1] - start < MIN_ITEMS:
            if start < len(sequence.cached):
                self._keep_aside(sequence)
            return start
        saved = found[0]
        # Read before what the sequence holds is kept aside, which may let it go to make room.
        state = self.saved.take(saved)
        self._keep_aside(sequence)
        if state is None or not self.saved.restore(state, sequence.seq_id):
            sequence.keep(0)
            sequence.last_prompt = None
            return 0
        sequence.cached, sequence.ends = list(saved.items), list(saved.ends)
        sequence.last_prompt, sequence.last_start = saved.last_prompt, saved.last_start
        return sequence.reusable(keys, False)

    def _keep_aside(self, sequence: _Sequence) -> None:
        """What ``sequence`` holds, into the prompt cache before something else takes its place."""
        if self.saved is not None and sequence.cached:
            self.saved.keep(sequence.seq_id, sequence.cached, sequence.ends, sequence.last_prompt, sequence.last_start)

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

    def _hand_back(self, job: Job, error: BaseException | None) -> None:
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
        for sequence in self._stepping():
            if sequence.pending and isinstance(sequence.pending[0], MediaChunk) and not self._evaluate_media(sequence):
                return
        takes = self._plan()
        if not takes:
            return
        outputs = self._fill(takes)
        stoppable = self._prompt_step or all(sequence.job.background for sequence in takes)
        with self._abortable(next(iter(takes)) if stoppable else None):
            status = lib.llama_decode(self._ctx, self._batch)
        if status != 0:
            self._failed(status, list(takes))
            return
        for sequence, take in takes.items():
            for token in sequence.pending[:take]:
                sequence.add(token)
            del sequence.pending[:take]
            self._said_read(sequence)
        self.evaluated["tokens"] += self._batch.n_tokens
        self._sample(outputs)

    @staticmethod
    def _said_read(sequence: _Sequence) -> None:
        """How far its prompt is read, to a job whose prompt still has a piece to go."""
        if sequence.pending and not sequence.generated:
            sequence.job.hand_over(PromptRead(sequence.position, sequence.prompt_positions, sequence.job.cached,
                                              time.monotonic() - sequence.started))

    def _plan(self) -> dict[_Sequence, int]:
        """What this step evaluates, as tokens per sequence: the next piece of one prompt (the
        first come, up to the prompt batch and its next media chunk), or one token of every
        sequence that is generating, taking turns while both wait. A prompt never shares a step:
        llama.cpp splits a batch over several caches into equal runs per sequence, so a prompt
        beside others would be cut where their lengths fall, and its logits (and so a seeded or
        near-tie reply) would depend on what else ran."""
        running = self._stepping()
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
        with self._abortable(sequence):
            after = self._media.evaluate(self._ctx, chunk, sequence.position, sequence.seq_id, self._prompt_batch)
        if after is None:
            # Stopped, or failed: what it put into the cache is taken out again.
            lib.llama_memory_seq_rm(self._memory, sequence.seq_id, sequence.position, -1)
            if not sequence.job.cancel.is_set() and not self._giving_way(sequence.job):
                self._end(sequence, ChatError("llama.cpp could not evaluate this medium with the model's projector. The server log may say more."))
            return False
        sequence.add(chunk.key, after - sequence.position)
        del sequence.pending[0]
        self.evaluated["media"] += 1
        self._said_read(sequence)
        return True

    @contextlib.contextmanager
    def _abortable(self, stopping: _Sequence | None) -> Iterator[None]:
        """While a prompt is evaluated (``stopping``'s), or a step of background work alone,
        llama.cpp stops as soon as the job is cancelled, or, for background work, as soon as another
        job arrives (it goes on later from where it was). The callback takes the GIL once per graph
        node, so it is set only then (a long prompt is where Stop must not wait, and another chat's
        first token must not wait for a summary's); a chat's generation step ends within a token anyway."""
        if stopping is None:
            yield
            return

        @lib.ggml_abort_callback
        def abort(_: Any) -> bool:
            return stopping.job.cancel.is_set() or self._giving_way(stopping.job)

        lib.llama_set_abort_callback(self._ctx, abort, None)
        try:
            yield
        finally:
            lib.llama_set_abort_callback(self._ctx, lib.ggml_abort_callback(), None)

    def _failed(self, status: int, step: list[_Sequence]) -> None:
        """After a llama_decode of the ``step``'s sequences that did not run: llama.cpp took the
        batch's tokens back out of the cache, and the step is tried again, unless it cannot succeed;
        then the step's conversations end with the reason, and the others go on."""
        if status == 2:
            # Stopped: a cancelled job ends at the next step, background work goes on later from
            # where it was, so what the stopped step put into the cache is taken out.
            for sequence in step:
                lib.llama_memory_seq_rm(self._memory, sequence.seq_id, sequence.position, -1)
            return
        if status == 1 and self._free_idle_caches():
            return
        error = ChatError(
            "llama.cpp has no room left in its context for all the conversations running at once; try again shortly, "
            "or load the model with a larger max_model_len."
            if status == 1 else f"llama.cpp could not evaluate the prompt (llama_decode returned {status}). The server log may say more."
        )
        for sequence in step:
            self._end(sequence, error)

    def _free_idle_caches(self) -> bool:
        """Empty the caches of the sequences no job runs on; False if there were none to empty."""
        idle = [s for s in self._sequences if s.job is None and s.cached]
        for sequence in idle:
            self._keep_aside(sequence)
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
