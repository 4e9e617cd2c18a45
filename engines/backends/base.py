"""The contract every backend implements, the reply it returns, and the request path they share.

``BaseEngine`` does everything that is the same on every backend. A request is checked (cheap,
on the event loop), then takes its places in the waiting line or is refused (engines/waiting_line.py)
before any work is done for it; then it is prepared once, off the event loop: its prompt rendered
and tokenized, fitted to the context, its media regularised. Once its turn comes the backend
generates, and the reply is parsed into reasoning, content and tool calls. A backend implements
only its own part: ``_complete`` (whole replies), ``_stream`` (one reply, piece by piece),
``close``, and ``_score`` if it scores.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from ..generation_args import INT64_MAX, GenerationArgs
from ..logprobs import LogprobNames, TokenLogprobs
from ..model_files.model_args import ModelArgs
from ..prompt.builder import Prompt, PromptBuilder
from ..prompt_progress import PromptRead
from ..prompt.reply_parser import ReplyChunk, ReplyParser, ReplyParts, ToolCall, parse_reply
from ..errors import ConfigError, ModelBusyError, UnsupportedError
from ..reply_format import ReplyFormat
from ..request import ChatRequest, MediaKind
from ..waiting_line import Places, PreparationTurns, QueuePlace, Ticket, WaitingLine

# Silent unless the operator asks (app.py --log-requests): what it logs are the users' own words.
REQUEST_LOG = logging.getLogger("anychat.requests")

T = TypeVar("T")
_END = object()
# Compiled reply formats an engine keeps, so a client that sends the same schema each time compiles it once.
COMPILED_FORMATS_KEPT = 64


@dataclass(frozen=True)
class Response:
    """One generated reply. Lengths are token counts; response_length includes the end token.
    ``response_text``: the reply as the model wrote it (of a remote reply, the server's answer,
    without the reasoning and tool calls it sent apart). ``parts`` is the reply read as reasoning,
    content and tool calls; ``logprobs``, where the request asked for them, each generated token's
    (GenerationArgs.logprobs); ``cached_tokens``, the prompt's first tokens found in a cache, so not
    read this time (on the backends that keep conversations: llamacpp, huggingface, vllm).
    ``admitted_at``: on a streamed reply, the time.monotonic() at which it got its place in line and
    the model began on it (what the traces split its wait by: engines/reply_traces.py); no part of
    what the reply is. ``stop_sequence``: the stop string (GenerationArgs.stop) that ended the
    reply, where one did (finish_reason is "stop" then; the text ends before it), as the backend's
    stop filter (engines/prompt/text_stream.py) or runtime matched it."""

    response_text: str
    response_length: int
    prompt_length: int
    finish_reason: Literal["stop", "length"]
    parts: ReplyParts = ReplyParts()
    logprobs: tuple[TokenLogprobs, ...] | None = None
    cached_tokens: int = 0
    stop_sequence: str | None = None
    admitted_at: float | None = field(default=None, compare=False, repr=False)


class CompiledFormats:
    """A backend's last COMPILED_FORMATS_KEPT compiled reply formats, compiled on worker threads
    and read on the event loop."""

    def __init__(self) -> None:
        self._kept: dict[ReplyFormat, Any] = {}
        self._lock = threading.Lock()

    def __contains__(self, reply_format: ReplyFormat) -> bool:
        return reply_format in self._kept

    def get(self, reply_format: ReplyFormat, compile: Callable[[ReplyFormat], Any]) -> Any:
        if reply_format in self._kept:
            return self._kept[reply_format]
        compiled = compile(reply_format)
        with self._lock:
            self._kept[reply_format] = compiled
            while len(self._kept) > COMPILED_FORMATS_KEPT:
                self._kept.pop(next(iter(self._kept)))
        return compiled


class BaseEngine(ABC):
    """A loaded model on one backend.

    Engines are driven from one event loop (ChatModel's); their async methods never block it.
    """

    name: ClassVar[str]
    # The settings of GenerationArgs.OPTIONAL this engine honours; it refuses the others.
    generation_settings: ClassVar[frozenset[str]] = frozenset()
    # True where closing this engine would harm another one started beside it (SGLang's
    # shutdown kills every child process of ours), so a model switch closes it first.
    close_before_next_load: ClassVar[bool] = False
    # Sequences the runtime keeps apart for background requests (ChatRequest.background), which
    # it pauses while any other request has work. Without any, a background request waits in the
    # line like every other.
    background_sequences: ClassVar[int] = 0
    # Whether count_prompt_tokens is the model's own count (else an estimate: a remote server that
    # does not count prompts).
    counts_prompts_exactly: bool = True

    model_args: ModelArgs
    prompts: PromptBuilder

    @property
    def tokenizer(self) -> Any:
        return self.prompts.tokenizer

    @property
    def model_id(self) -> str:
        """The model's name in the API."""
        return self.model_args.model_id

    def count_tokens(self, text: str) -> int:
        """How many tokens the model's tokenizer makes of ``text``, without special tokens."""
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def count_prompt_tokens(self, request: ChatRequest) -> int:
        """How many tokens the prompt of ``request`` is."""
        return len(self.prompts.token_ids(self.render_prompt(request)))

    @property
    def can_generate(self) -> bool:
        return self.prompts.can_generate

    @property
    def media_kinds(self) -> frozenset[MediaKind]:
        """What the model accepts besides text."""
        return self.prompts.media_kinds

    @property
    def generation_defaults(self) -> GenerationArgs:
        return self.prompts.defaults

    @functools.cached_property
    def logprob_names(self) -> LogprobNames:
        return LogprobNames(self.tokenizer)

    @functools.cached_property
    def line(self) -> WaitingLine:
        """The requests this engine is answering and those waiting for it."""
        args = self.model_args
        return WaitingLine(args.max_concurrent, args.max_waiting, args.max_waiting_per_user)

    @functools.cached_property
    def background_line(self) -> WaitingLine:
        """The line of background requests: beside the other line where the engine keeps
        sequences for them (so one never takes another's slot), else that line."""
        args = self.model_args
        if not self.background_sequences:
            return self.line
        return WaitingLine(self.background_sequences, args.max_waiting, args.max_waiting_per_user)

    @functools.cached_property
    def _preparing(self) -> PreparationTurns:
        # No more prompts are prepared at once than replies are generated.
        return PreparationTurns(self.model_args.max_concurrent)

    # ---- the request path shared by every backend

    def check(self, request: ChatRequest) -> GenerationArgs:
        """What this engine makes of ``request`` before any work: its generation settings, or a
        clear error where this model or backend cannot answer it."""
        generation = self.prompts.generation(request)
        refuse_unsupported_settings(generation, self.name, self.generation_settings)
        return generation

    async def _compiled(self, request: ChatRequest) -> None:
        """The request's reply format compiled, where it is not yet, before the request takes its
        places in line: a compile (up to seconds, in a child process: grammar_sandbox) holds none of
        the model's slots. Compiles run one at a time, each user's after their own previous one,
        and a user already waiting for as many as they may hold places in line is refused."""
        reply_format = request.reply_format
        if reply_format is None or reply_format in self._compiled_formats:
            return
        waiting, most = self._compiling.held(request.user), self.line.most_per_user
        if waiting >= most:
            raise ModelBusyError(
                f"Your requests already wait for {waiting} new reply format(s) to be compiled, as many as one user may hold places "
                f"in line ({most}: max_concurrent and max_waiting_per_user; app.py --max-waiting-per-user). "
                "Try again once your earlier requests are answered."
            )
        await self._compiling.run(request.user, self.reply_constraint, reply_format)

    def reply_constraint(self, reply_format: ReplyFormat | None) -> Any:
        """What this backend decodes ``reply_format`` under (None for free text), compiled once
        per format (``_in_line`` compiles it before the request is prepared)."""
        return None if reply_format is None else self._compiled_formats.get(reply_format, self._compile_reply_format)

    @functools.cached_property
    def _compiled_formats(self) -> CompiledFormats:
        return CompiledFormats()

    @functools.cached_property
    def _compiling(self) -> PreparationTurns:
        # One compile at a time: many new schemas at once take one core, not all of them.
        return PreparationTurns(1)

    def render_prompt(self, request: ChatRequest) -> str:
        """The exact prompt text the model would see for ``request`` (for inspection and tests)."""
        return self.prompts.render(request, self.check(request))

    async def chat(self, request: ChatRequest) -> list[Response]:
        """All ``num_return_sequences`` replies, once complete."""
        generation = self.check(request)
        async with self._in_line(request, generation) as (prompt, (ticket,)):
            await ticket.wait()
            args = prompt.generation
            # Greedy decoding gives n identical replies; generating them once is the same answer.
            copies = args.num_return_sequences if args.greedy else 1
            responses = await self._complete(prompt, args.replace(num_return_sequences=args.num_return_sequences // copies))
        return [_with_parts(prompt, response) for response in responses for _ in range(copies)]

    async def stream_replies(self, request: ChatRequest, progress: bool = False,
                             raw: bool = False) -> AsyncIterator[tuple[int, QueuePlace | PromptRead | ReplyChunk | str | TokenLogprobs | Response]]:
        """All ``num_return_sequences`` replies written side by side, each item paired with its
        reply's index: the reply as typed chunks (reasoning, content, tool-call text) as it is
        written, or with ``raw`` its text as the model wrote it (of a remote reply, the text the
        server sent as its answer: reasoning and tool calls it sent apart are not text), then the
        finished Response, whose ``parts`` hold the parsed reply. Where the request asks for
        logprobs, each token's TokenLogprobs comes no later than its text. With ``progress``, a
        reply that has to wait for the model first yields its QueuePlace each time the line moves,
        the last (``ahead == 0``) as it starts, then, where its prompt is read piece by piece, a
        PromptRead after each piece but the last. The request is prepared once, and its replies take
        their places in line all at once or not at all; the i-th reply samples with ``seed + i``.
        Greedy replies would all be the same: one is written, under every index. Closing the stream
        stops the model."""
        generation = self.check(request)
        count = generation.num_return_sequences
        written = 1 if generation.greedy else count
        async with self._in_line(request, generation, written) as (prompt, tickets):
            replies = [self._reply(prompt, ticket, index, progress, raw) for index, ticket in enumerate(tickets)]
            # Closed here, not left to the garbage collector: the model has stopped when this ends.
            async with contextlib.aclosing(side_by_side(replies)) as items:
                async for index, item in items:
                    for shown_as in range(count) if written == 1 else (index,):
                        yield shown_as, item

    async def _reply(self, prompt: Prompt, ticket: Ticket, index: int, progress: bool,
                     raw: bool) -> AsyncIterator[QueuePlace | PromptRead | ReplyChunk | str | TokenLogprobs | Response]:
        """Reply ``index`` to ``prompt`` once ``ticket`` is admitted, as in stream_replies; its
        slot is given up as soon as it ends, for the request's other replies too."""
        with ticket:
            async with contextlib.aclosing(ticket.places()) as places:
                async for place in places:
                    if progress:
                        yield place
            admitted = time.monotonic()
            async with self._run(prompt, index) as items, contextlib.aclosing(read_reply(prompt, items, raw)) as read:
                async for item in read:
                    if isinstance(item, Response):
                        yield dataclasses.replace(item, admitted_at=admitted)
                    elif progress or not isinstance(item, PromptRead):
                        yield item

    @contextlib.asynccontextmanager
    async def _in_line(self, request: ChatRequest, generation: GenerationArgs,
                       replies: int = 1) -> AsyncIterator[tuple[Prompt, Places]]:
        """The request's reply format compiled, then places in line for ``replies`` replies to it
        (or the refusal, before any further work), then the request prepared, counted in its
        user's share of the line; the places are given up when the block ends."""
        await self._compiled(request)
        line = self.background_line if request.background else self.line
        with line.join(request.user, replies) as places:
            prompt = await self._preparing.run(request.user, self.prompts.prepare, request, generation)
            REQUEST_LOG.info("from %s to %s, %s: %r", request.user or "-", self.model_id, prompt.generation, prompt.text)
            yield prompt, places

    def _run(self, prompt: Prompt, index: int = 0) -> contextlib.aclosing:
        """The backend's stream of one reply (the index-th, with its own seed), closed (so the
        model stops) however the caller leaves."""
        args = prompt.generation
        seed = None if args.seed is None else (args.seed + index) % (INT64_MAX + 1)
        return contextlib.aclosing(self._stream(prompt, args.replace(num_return_sequences=1, seed=seed)))

    async def get_scores(self, batch_input: list[str], user: str | None = None, **kwargs: Any) -> list[float]:
        """Reward scores of whole texts, for reward (sequence-classification) models."""
        check_scores_request(self.can_generate, batch_input, kwargs)
        with self.line.join(user) as (ticket,):
            await ticket.wait()
            return await self._score(batch_input)

    # ---- what each backend implements

    @abstractmethod
    async def _complete(self, prompt: Prompt, args: GenerationArgs) -> list[Response]:
        """``args.num_return_sequences`` separately sampled replies to ``prompt``."""

    @abstractmethod
    def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | ReplyChunk | ToolCall | PromptRead | TokenLogprobs | Response]:
        """One reply: where the backend reads a long prompt piece by piece, a PromptRead after
        each piece but the last; its text piece by piece (with ``args.logprobs``, each token's TokenLogprobs
        before its text), then its Response once the model finished on its own. Leaving early (a
        closed iterator, a cancelled task) stops the model. A backend that receives parts of the
        reply already typed (a remote server's reasoning and tool calls) hands them on as they
        are: reasoning as "reasoning" ReplyChunks, each tool call whole as a ToolCall before the
        Response, and what to show of calls being written as "tool_call" ReplyChunks."""

    def _compile_reply_format(self, reply_format: ReplyFormat) -> Any:
        """``reply_format`` in the form this backend's runtime takes, or a ConfigError naming the
        part of its schema that the runtime cannot enforce."""
        raise UnsupportedError(f"The {self.name} engine cannot hold a reply to a JSON format; load the model on another backend.")

    async def _score(self, batch_input: list[str]) -> list[float]:
        """Backends that load reward models score with them; the others refuse such models at load."""
        raise UnsupportedError(f"The {self.name} engine does not score texts.")

    @property
    def prompt_cache(self) -> dict[str, int] | None:
        """What the engine keeps of conversations' prompts across chats, where it keeps them itself (llamacpp, huggingface)."""
        return None

    @property
    def memory_bytes(self) -> int | None:
        """What this model holds in memory, as its backend can tell it (each backend says how), or
        None where it cannot: one process's memory is every loaded model's together."""
        return None

    @abstractmethod
    def unfinished_requests(self) -> int:
        """The replies the runtime itself is still working on (queued inside it, evaluating their
        prompt or generating), by its own count rather than the waiting line's: a reply whose
        stream was closed must no longer be among them."""

    @abstractmethod
    async def close(self) -> None:
        """Free the model and everything the backend holds (memory, processes, threads)."""


def refuse_unsupported_settings(args: GenerationArgs, engine: str, supported: frozenset[str]) -> None:
    """Settings only some engines honour are refused by the others unless left at their default,
    so a setting is never silently dropped."""
    defaults = GenerationArgs()
    for name in sorted(GenerationArgs.OPTIONAL - supported):
        if getattr(args, name) != getattr(defaults, name):
            raise UnsupportedError(
                f"{name} is not supported by the {engine} engine; leave it out or at its default "
                f"({getattr(defaults, name)}), or load the model on a backend that supports it.",
                setting=name,
            )


def check_scores_request(can_generate: bool, batch_input: list[str], kwargs: dict[str, Any]) -> None:
    """The same refusals from every engine's get_scores, before any work starts."""
    if can_generate:
        raise UnsupportedError(
            "This model does not produce scores: it is a generative model. "
            "Load a reward model (a sequence-classification model with one label) to score texts."
        )
    if kwargs:
        raise ConfigError(f"Unknown scoring argument(s): {', '.join(sorted(kwargs))}.")
    if not batch_input or not all(isinstance(text, str) for text in batch_input):
        raise ConfigError("get_scores needs a non-empty list of texts.")


def _with_parts(prompt: Prompt, response: Response) -> Response:
    """``response`` with its text read into parts, where its backend did not read them as it
    received them (remote: read_reply). Parts a backend read are empty only where its text reads
    as nothing too, so reading that text again changes nothing."""
    if response.parts != ReplyParts():
        return response
    parts = parse_reply(response.response_text, prompt.parse_tools, prompt.opens_reasoning)
    return dataclasses.replace(response, parts=parts)


async def read_reply(prompt: Prompt, items: AsyncIterator[Any], raw: bool = False) -> AsyncIterator[Any]:
    """A backend's stream of one reply (``_stream``) as stream_replies gives it: its text read
    into typed chunks as it comes (with ``raw``, the text as it is), the parts the backend
    received already typed passed on (none with ``raw``: they are not the model's text), and
    the Response, whose ``parts`` hold the whole reply read."""
    parser = ReplyParser(prompt.parse_tools, prompt.opens_reasoning)
    async for item in items:
        if isinstance(item, str):
            chunks = parser.push(item)
            if raw:
                yield item
            else:
                for chunk in chunks:
                    yield chunk
        elif isinstance(item, ToolCall):
            parser.add_call(item)
        elif isinstance(item, ReplyChunk):
            if item.kind == "reasoning":
                parser.add_reasoning(item.text)
            if not raw:
                yield item
        elif isinstance(item, Response):
            held, calls = parser.finish()
            if not raw:
                for chunk in held:
                    yield chunk
            yield dataclasses.replace(item, parts=parser.parts(calls))
        else:
            yield item


async def side_by_side(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """The items of several streams as they come, each with its stream's index. An error in
    one ends them all; however this ends, every stream is closed (so its model stops) first."""
    if len(streams) == 1:
        async with contextlib.aclosing(streams[0]) as only:
            async for item in only:
                yield 0, item
        return
    arrived: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def drain(index: int, stream: AsyncIterator[T]) -> None:
        try:
            async with contextlib.aclosing(stream) as items:
                async for item in items:
                    arrived.put_nowait((index, item))
        except Exception as error:  # handed to the consumer, which raises it in its own task
            arrived.put_nowait((index, error))
        else:
            arrived.put_nowait((index, _END))

    tasks = [asyncio.create_task(drain(index, stream)) for index, stream in enumerate(streams)]
    try:
        ended = 0
        while ended < len(tasks):
            index, item = await arrived.get()
            if item is _END:
                ended += 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
