"""The HuggingFace transformers backend: model.generate in worker threads, streamed to asyncio."""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMultimodalLM,
    AutoModelForSequenceClassification,
    DynamicCache,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.streamers import BaseStreamer

from ..errors import ModelLoadError
from ..generation_args import GenerationArgs
from ..logprobs import RawLogprobs, TokenLogprobs, log_softmax, top_logprobs
from ..model_files import Progress, within
from ..model_files.model_args import ModelArgs
from ..model_files.paths import resolve_model_path
from ..prompt.builder import LOAD_HINT, Prompt, PromptBuilder
from ..prompt.text_stream import IncrementalDecoder, find_stop
from ..prompt_progress import PromptRead
from ..reply_format import ReplyFormat
from .base import BaseEngine, Response
from .huggingface_prompt_cache import KeptCaches
from .xgrammar_format import XGrammarFormats, logits_processor

# generate() evaluates the whole prompt in one forward pass, which nothing can interrupt, so a
# long prompt would hold the model for as long again after Stop (15 s for 3,500 tokens here).
# Evaluated in chunks of this many tokens, Stop takes effect between two chunks, and the page
# shows how far the reading is.
PREFILL_CHUNK_TOKENS = 512

_DTYPES = {"auto": "auto", "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class HuggingFaceEngine(BaseEngine):
    name = "huggingface"
    generation_settings = frozenset({"min_p", "logprobs"})

    def __init__(self, model_args: ModelArgs, generation: dict[str, Any] | None = None, progress: Progress | None = None) -> None:
        report = progress or (lambda fraction, message: None)
        self.model_args = model_args
        self.model_path = path = resolve_model_path(model_args.model_name_or_path, within(progress, 0.0, 0.8))
        report(0.85, f"Loading {model_args.display_name}…")
        self.prompts = PromptBuilder.from_pretrained(path, model_args, generation)
        model_class = (
            AutoModelForMultimodalLM if self.prompts.media
            else AutoModelForCausalLM if self.can_generate
            else AutoModelForSequenceClassification
        )
        try:
            self.model = model_class.from_pretrained(path, dtype=_DTYPES[model_args.infer_dtype], trust_remote_code=model_args.trust_remote_code)
        except (OSError, ValueError, KeyError) as error:
            raise ModelLoadError(f"Could not load {model_args.display_name}: {error}. {LOAD_HINT}") from error
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device).eval()
        if not self.can_generate:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self._eos_ids = _eos_token_ids(self.model.generation_config, self.tokenizer) if self.can_generate else []
        # One long-lived thread per slot of the waiting line (BaseEngine.line): torch's per-thread
        # OpenMP pools are set up once, not per request.
        self._executor = ThreadPoolExecutor(model_args.max_concurrent, thread_name_prefix="hf-generate")
        # The jobs handed to those threads that have not returned yet.
        self._generating: set[asyncio.Future] = set()
        if self.can_generate:
            self._formats = XGrammarFormats(self.tokenizer, self.model.config.get_text_config().vocab_size)
        limit = model_args.prompt_cache_bytes
        self._kept = KeptCaches(limit) if limit and self.can_generate and not self.media_kinds else None

    def _compile_reply_format(self, reply_format: ReplyFormat) -> Any:
        return self._formats.compile(reply_format)

    async def _inputs(self, prompt: Prompt, args: GenerationArgs) -> tuple[torch.Tensor, dict[str, torch.Tensor], GenerationArgs]:
        """Prompt ids and, for media, the processor's tensors for generate; ``args`` fitted to the
        prompt's length once each media token is expanded."""
        if not prompt.media:
            return torch.tensor([prompt.ids], device=self.device), {}, args
        # Running the processor over images, video and audio is slow: off the event loop.
        ids, media_inputs = await asyncio.to_thread(
            self.prompts.media.model_inputs, prompt.text, prompt.media, self.device, self.model.dtype
        )
        return ids, media_inputs, self.prompts.fit(ids.shape[1], args)

    # ---- generation

    async def _complete(self, prompt: Prompt, args: GenerationArgs) -> list[Response]:
        prompt_ids, media_inputs, args = await self._inputs(prompt, args)
        cancel = threading.Event()
        grammar = self.reply_constraint(prompt.request.reply_format)
        recorder = _LogprobRecorder(args.logprobs) if args.logprobs is not None else None
        sequences, cached = await self._in_worker(cancel, lambda: self._generate(prompt_ids, args, cancel, None, media_inputs, recorder, grammar))
        prompt_length = prompt_ids.shape[1]
        if recorder is None:
            return [self._response(row[prompt_length:].tolist(), prompt_length, args, cached=cached) for row in sequences]
        recorder.resolve(sequences[:, -1])
        return [self._response(row[prompt_length:].tolist(), prompt_length, args, [self.logprob_names.named(raw) for raw in raws], cached)
                for row, raws in zip(sequences, recorder.rows or [[]] * len(sequences))]

    async def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | PromptRead | TokenLogprobs | Response]:
        prompt_ids, media_inputs, args = await self._inputs(prompt, args)
        cancel = threading.Event()
        loop = asyncio.get_running_loop()
        grammar = self.reply_constraint(prompt.request.reply_format)
        recorder = _LogprobRecorder(args.logprobs) if args.logprobs is not None else None
        streamer = _LoopStreamer(loop, recorder)
        worker = self._in_worker(cancel, lambda: self._generate(prompt_ids, args, cancel, streamer, media_inputs, recorder, grammar))
        worker_task = asyncio.ensure_future(worker)
        decoder = IncrementalDecoder(self.tokenizer, args.skip_special_tokens, args.stop)
        new_ids: list[int] = []
        logprobs: list[TokenLogprobs] | None = None if recorder is None else []
        try:
            while (item := await streamer.queue.get()) is not None:
                if isinstance(item, PromptRead):
                    yield item
                    continue
                ids, raw = item
                if raw is not None:
                    logprobs.append(self.logprob_names.named(raw))
                    yield logprobs[-1]
                new_ids.extend(ids)
                if piece := decoder.push(ids):
                    yield piece
                if decoder.stopped:
                    break
            if tail := decoder.flush():
                yield tail
            _, cached = await asyncio.shield(worker_task)  # ending with the same token, or a stop string
            yield self._response(new_ids, prompt_ids.shape[1], args, logprobs, cached)
        finally:
            cancel.set()
            # The slot is released only once the model has really stopped.
            await asyncio.shield(worker_task)

    async def _in_worker(self, cancel: threading.Event, job: Callable[[], Any]) -> Any:
        """Run ``job`` on a generation thread; if the awaiting task is cancelled, stop the model
        and wait for the thread before letting go."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, job)
        self._generating.add(future)
        future.add_done_callback(self._generating.discard)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.set()
            await asyncio.wait([future])
            raise

    def unfinished_requests(self) -> int:
        return len(self._generating)

    def _generate(
        self, prompt_ids: torch.Tensor, args: GenerationArgs, cancel: threading.Event, streamer, media_inputs: dict[str, torch.Tensor],
        recorder: _LogprobRecorder | None = None, grammar: Any = None,
    ) -> tuple[torch.Tensor, int]:
        """generate's sequences, and how many of the prompt's tokens a kept conversation held."""
        try:
            if args.seed is not None:
                torch.manual_seed(args.seed)
            with torch.inference_mode():
                if not self._fills_own_cache(args):
                    return self._generate_from(prompt_ids, args, cancel, streamer, media_inputs, recorder, grammar, {}), 0
                cache, reused, exact = self._prefilled(prompt_ids, cancel, streamer)
                # Stopped while the prompt was read, the reply is the prompt alone.
                written = prompt_ids if cancel.is_set() else self._generate_from(
                    prompt_ids, args, cancel, streamer, media_inputs, recorder, grammar, {"past_key_values": cache})
                if self._kept is not None:  # what its cache holds of the prompt and the reply, for the next turn
                    self._kept.keep(written[0, :cache.get_seq_length()].tolist(), cache, exact)
                return written, reused
        finally:
            if streamer is not None:
                streamer.end()

    def _generate_from(self, prompt_ids: torch.Tensor, args: GenerationArgs, cancel: threading.Event, streamer,
                       media_inputs: dict[str, torch.Tensor], recorder: _LogprobRecorder | None, grammar: Any,
                       cache: dict[str, DynamicCache]) -> torch.Tensor:
        return self.model.generate(
            input_ids=prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            **self._sampling(args, recorder, grammar),
            stopping_criteria=StoppingCriteriaList([_CancelCriteria(cancel), _StopStringCriteria(self.tokenizer, args)]),
            streamer=streamer,
            **cache,
            **media_inputs,
        )

    def _fills_own_cache(self, args: GenerationArgs) -> bool:
        """Text-only models, for one reply: their cache is read in chunks and kept for the next
        turn. (Multimodal models place their media and positions inside generate, and several
        replies would need the cache copied per row.)"""
        return not self.media_kinds and args.num_return_sequences == 1

    def _prefilled(self, prompt_ids: torch.Tensor, cancel: threading.Event,
                   streamer: _LoopStreamer | None) -> tuple[DynamicCache, int, int]:
        """A KV cache for the prompt, how many of its tokens came from a kept conversation, and
        how many of its first tokens were read in whole chunks.
        A prompt of one chunk is left whole to generate(), as it always was. A longer one: what a
        kept conversation holds of it (KeptCaches), the rest but its last token read chunk by
        chunk, how far said to the ``streamer`` after each chunk but the last, Stop taking effect
        between two; generate() then evaluates the last token, from this cache."""
        prompt, chunk = prompt_ids[0].tolist(), PREFILL_CHUNK_TOKENS
        if len(prompt) <= chunk:
            return DynamicCache(config=self.model.config), 0, 0
        cache, reused = self._kept.take(prompt, chunk) if self._kept is not None else (None, 0)
        cache = cache if cache is not None else DynamicCache(config=self.model.config)
        started, cached_length = time.monotonic(), len(prompt) - 1
        for start in range(reused, cached_length, chunk):
            if cancel.is_set():
                return cache, reused, start
            end = min(start + chunk, cached_length)
            self.model(input_ids=prompt_ids[:, start:end], past_key_values=cache, use_cache=True)
            if streamer is not None and end < cached_length:
                streamer.reading(PromptRead(end, len(prompt), reused, time.monotonic() - started))
        return cache, reused, cached_length // chunk * chunk

    def _sampling(self, args: GenerationArgs, recorder: _LogprobRecorder | None, grammar: Any) -> dict[str, Any]:
        """generate's generation_config and logits processors. Where logprobs are recorded, the
        recorder comes first, so it reads the raw logits, then the repetition penalty (generate
        puts the processors it makes itself before those it is given); the reply format's grammar
        (xgrammar's, compiled from the request's reply format) last."""
        config = self._generation_config(args)
        processors = []
        if recorder is not None:
            processors.append(recorder)
            if config.repetition_penalty != 1.0:
                processors.append(RepetitionPenaltyLogitsProcessor(config.repetition_penalty))
                config.repetition_penalty = 1.0
        if grammar is not None:
            processors.append(logits_processor(grammar))
        return {"generation_config": config, "logits_processor": LogitsProcessorList(processors)}

    def _generation_config(self, args: GenerationArgs) -> GenerationConfig:
        settings: dict[str, Any] = {
            "max_new_tokens": args.max_new_tokens,
            "repetition_penalty": args.repetition_penalty,
            "eos_token_id": self._eos_ids,
            "pad_token_id": self.tokenizer.pad_token_id,
            "do_sample": not args.greedy,
            # Neutral values for greedy runs, so the model's own sampling defaults are not mixed in.
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": 50,
        }
        if not args.greedy:
            settings.update(
                temperature=args.temperature,
                top_p=args.top_p,
                top_k=args.top_k,
                min_p=args.min_p or None,
                num_return_sequences=args.num_return_sequences,
            )
        return GenerationConfig(**settings)

    def _response(self, new_ids: list[int], prompt_length: int, args: GenerationArgs,
                  logprobs: list[TokenLogprobs] | None = None, cached: int = 0) -> Response:
        end = next((i + 1 for i, token in enumerate(new_ids) if token in self._eos_ids), None)
        ids = new_ids[:end] if end else new_ids
        # A row of a sampled batch that a stop string ended early is padded up to the longest row.
        while end is None and ids and ids[-1] == self.tokenizer.pad_token_id:
            ids = ids[:-1]
        text = self.tokenizer.decode(ids, skip_special_tokens=args.skip_special_tokens)
        stopped = find_stop(text, args.stop)
        if stopped is not None:
            text = text[:stopped[0]]
        hit_stop = end is not None or stopped is not None
        return Response(
            response_text=text,
            response_length=len(ids),
            prompt_length=prompt_length,
            finish_reason="length" if not hit_stop and len(ids) >= args.max_new_tokens else "stop",
            logprobs=None if logprobs is None else tuple(logprobs[:len(ids)]),
            cached_tokens=cached,
            stop_sequence=None if stopped is None else stopped[1],
        )

    # ---- scores

    async def _score(self, batch_input: list[str]) -> list[float]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._score_batch, batch_input)

    def _score_batch(self, batch_input: list[str]) -> list[float]:
        inputs = self.tokenizer(batch_input, padding=True, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            # The sequence-classification head already pools at each row's last non-pad token.
            logits = self.model(**inputs).logits
        return logits[:, 0].float().tolist()

    # ---- lifetime

    @property
    def prompt_cache(self) -> dict[str, int] | None:
        """What the kept conversations' caches hold (None without them)."""
        return self._kept.summary if self._kept is not None else None

    @functools.cached_property
    def _weights_bytes(self) -> int:
        # Each tensor once: tied weights (the embeddings and the output layer) share one.
        tensors = {tensor.data_ptr(): tensor.numel() * tensor.element_size() for tensor in (*self.model.parameters(), *self.model.buffers())}
        return sum(tensors.values())

    @property
    def memory_bytes(self) -> int:
        """The model's parameters and buffers, and the conversations' caches kept between replies
        (the caches of the replies being written, which last as long as each, are left out)."""
        return self._weights_bytes + ((self.prompt_cache or {}).get("memory_bytes", 0))

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        if self._kept is not None:
            self._kept.clear()
        self.model = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _eos_token_ids(generation_config: GenerationConfig, tokenizer: Any) -> list[int]:
    eos = generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(ids)


class _CancelCriteria(StoppingCriteria):
    """Ends generation at the next token once the consumer has gone away."""

    def __init__(self, cancel: threading.Event) -> None:
        self._cancel = cancel

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self._cancel.is_set(), dtype=torch.bool, device=input_ids.device)


class _StopStringCriteria(StoppingCriteria):
    """Ends each row once its text holds a stop string, decoding only the row's new token at
    each step (the decoder the stream uses, so both cut at the same place). transformers' own
    StopStringCriteria precomputes a vocabulary-sized table per stop string in pure Python, on
    the generation thread: one string of 4,000 characters held the model 40 s here and took
    1.5 GB more memory."""

    def __init__(self, tokenizer: Any, args: GenerationArgs) -> None:
        self._tokenizer = tokenizer
        self._args = args
        self._rows: list[IncrementalDecoder] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if not self._args.stop:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if not self._rows:
            args = self._args
            self._rows = [IncrementalDecoder(self._tokenizer, args.skip_special_tokens, args.stop) for _ in range(input_ids.shape[0])]
        for decoder, token in zip(self._rows, input_ids[:, -1].tolist()):
            decoder.push([token])
        return torch.tensor([decoder.stopped for decoder in self._rows], dtype=torch.bool, device=input_ids.device)


class _LogprobRecorder(LogitsProcessor):
    """Reads each step's logits, as the first of generate's logits processors (before any
    penalty, temperature or top-k/p changes them), and once the step's tokens are chosen
    (``resolve``) keeps each row's RawLogprobs in ``rows``. Only the last step's log-softmax is
    held: a step is resolved by the streamer as its tokens come out, else by the next step."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._step: list[Any] | None = None
        self.rows: list[list[RawLogprobs]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.resolve(input_ids[:, -1])
        self._step = [log_softmax(row) for row in scores.float().cpu().numpy()]
        return scores

    def resolve(self, tokens: torch.Tensor) -> list[RawLogprobs]:
        """Each row's RawLogprobs for the ``tokens`` just chosen; none where that step is resolved already."""
        if self._step is None:
            return []
        step, self._step = self._step, None
        if not self.rows:
            self.rows = [[] for _ in step]
        chosen = [top_logprobs(logprobs, token, self._count) for logprobs, token in zip(step, tokens.tolist())]
        for row, raw in zip(self.rows, chosen):
            row.append(raw)
        return chosen


class _LoopStreamer(BaseStreamer):
    """Hands each new token id from the generation thread to an asyncio queue, with its
    RawLogprobs where a recorder reads them (else None).

    It does no decoding on the generation thread, which keeps the model's own loop as fast as
    bare generate; the event loop decodes.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, recorder: _LogprobRecorder | None = None) -> None:
        self.queue: asyncio.Queue[tuple[list[int], RawLogprobs | None] | PromptRead | None] = asyncio.Queue()
        self._loop = loop
        self._recorder = recorder
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        tokens = value.reshape(-1)
        raw = self._recorder.resolve(tokens)[:1] if self._recorder else []
        self._loop.call_soon_threadsafe(self.queue.put_nowait, (tokens[:1].tolist(), raw[0] if raw else None))

    def reading(self, read: PromptRead) -> None:
        self._loop.call_soon_threadsafe(self.queue.put_nowait, read)

    def end(self) -> None:
        self._loop.call_soon_threadsafe(self.queue.put_nowait, None)
