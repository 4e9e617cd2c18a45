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
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from ..errors import UnsupportedError
from ..generation_args import INT64_MAX, GenerationArgs
from ..model_files.model_args import ModelArgs
from ..prompt.builder import Prompt, PromptBuilder
from ..prompt.media import AudioInput, ImageInput, VideoInput
from ..prompt.reply_parser import ReplyChunk, ReplyParser, ReplyParts, parse_reply
from ..request import ChatRequest, check_scores_request, refuse_unsupported_settings
from ..waiting_line import Places, PreparationTurns, QueuePlace, Ticket, WaitingLine

MediaKind = Literal["image", "video", "audio"]
T = TypeVar("T")
_END = object()


@dataclass(frozen=True)
class Response:
    """One generated reply. Lengths are token counts; response_length includes the end token.
    ``parts`` is the reply read as reasoning, content and tool calls."""

    response_text: str
    response_length: int
    prompt_length: int
    finish_reason: Literal["stop", "length"]
    parts: ReplyParts = ReplyParts()


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

    model_args: ModelArgs
    prompts: PromptBuilder

    @property
    def tokenizer(self) -> Any:
        return self.prompts.tokenizer

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
    def line(self) -> WaitingLine:
        """The requests this engine is answering and those waiting for it."""
        args = self.model_args
        return WaitingLine(args.max_concurrent, args.max_waiting, args.max_waiting_per_user)

    @functools.cached_property
    def _preparing(self) -> PreparationTurns:
        # No more prompts are prepared at once than replies are generated.
        return PreparationTurns(self.model_args.max_concurrent)

    # ---- the request path shared by every backend

    def check_request(
        self,
        messages: list[dict[str, Any]],
        system: str | None = None,
        tools: str | list[dict] | None = None,
        images: list[ImageInput] | None = None,
        videos: list[VideoInput] | None = None,
        audios: list[AudioInput] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        **generation: Any,
    ) -> ChatRequest:
        """The checked request, or a clear error before any work starts."""
        media = {"image": images, "video": videos, "audio": audios}
        request = self.prompts.request(messages, system, tools, media, chat_template_kwargs, generation)
        refuse_unsupported_settings(request.generation, self.name, self.generation_settings)
        return request

    def render_prompt(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                      chat_template_kwargs: dict[str, Any] | None = None, **generation: Any) -> str:
        """The exact prompt text the model would see for these messages (for inspection and tests)."""
        return self.prompts.render(self.prompts.request(messages, system, tools, {}, chat_template_kwargs, generation))

    async def chat(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                   images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                   audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                   user: str | None = None, **generation: Any) -> list[Response]:
        """All ``num_return_sequences`` replies, once complete. ``user`` (a login name or a
        client's address) is whom the request counts for in the waiting line."""
        request = self.check_request(messages, system, tools, images, videos, audios, chat_template_kwargs, **generation)
        async with self._in_line(request, user) as (prompt, (ticket,)):
            await ticket.wait()
            args = prompt.generation
            # Greedy decoding gives n identical replies; generating them once is the same answer.
            copies = args.num_return_sequences if args.greedy else 1
            responses = await self._complete(prompt, args.replace(num_return_sequences=args.num_return_sequences // copies))
        return [_with_parts(prompt, response) for response in responses for _ in range(copies)]

    async def stream_chat(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                          images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                          audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                          on_finish: Callable[[Response], None] | None = None, user: str | None = None,
                          **generation: Any) -> AsyncIterator[str]:
        """The first reply's text, piece by piece (num_return_sequences is ignored). Closing the
        iterator cancels generation. ``on_finish`` gets the whole reply (its token counts and
        finish reason) once the model has finished on its own, before the iterator ends."""
        generation["num_return_sequences"] = 1
        request = self.check_request(messages, system, tools, images, videos, audios, chat_template_kwargs, **generation)
        async with self._in_line(request, user) as (prompt, (ticket,)):
            await ticket.wait()
            async with self._run(prompt) as items:
                async for item in items:
                    if isinstance(item, Response):
                        if on_finish is not None:
                            on_finish(_with_parts(prompt, item))
                    else:
                        yield item

    async def stream_reply(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                           images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                           audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                           queue_places: bool = False, user: str | None = None,
                           **generation: Any) -> AsyncIterator[QueuePlace | ReplyChunk | Response]:
        """The first reply as typed chunks (reasoning, content, tool-call text) as it is written,
        then the finished Response, whose ``parts`` hold the parsed tool calls. With
        ``queue_places``, a request that has to wait for the model first yields its QueuePlace
        each time the line moves, the last one (``ahead == 0``) as it starts."""
        generation["num_return_sequences"] = 1
        replies = self.stream_replies(messages, system, tools, images, videos, audios, chat_template_kwargs, queue_places, user, **generation)
        async with contextlib.aclosing(replies):
            async for _, item in replies:
                yield item

    async def stream_replies(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                             images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                             audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                             queue_places: bool = False, user: str | None = None,
                             **generation: Any) -> AsyncIterator[tuple[int, QueuePlace | ReplyChunk | Response]]:
        """All ``num_return_sequences`` replies written side by side, each item as in
        stream_reply and paired with its reply's index. The request is prepared once, and its
        replies take their places in line all at once or not at all; the i-th reply samples with
        ``seed + i``. Greedy replies would all be the same: one is written, under every index."""
        request = self.check_request(messages, system, tools, images, videos, audios, chat_template_kwargs, **generation)
        count = request.generation.num_return_sequences
        written = 1 if request.generation.greedy else count
        async with self._in_line(request, user, written) as (prompt, tickets):
            replies = [self._reply(prompt, ticket, index, queue_places) for index, ticket in enumerate(tickets)]
            async for index, item in side_by_side(replies):
                for shown_as in range(count) if written == 1 else (index,):
                    yield shown_as, item

    async def _reply(self, prompt: Prompt, ticket: Ticket, index: int, queue_places: bool) -> AsyncIterator[QueuePlace | ReplyChunk | Response]:
        """Reply ``index`` to ``prompt`` once ``ticket`` is admitted, as in stream_reply; its
        slot is given up as soon as it ends, for the request's other replies too."""
        with ticket:
            async with contextlib.aclosing(ticket.places()) as places:
                async for place in places:
                    if queue_places:
                        yield place
            parser = ReplyParser(prompt.parse_tools, prompt.opens_reasoning)
            async with self._run(prompt, index) as items:
                async for item in items:
                    if isinstance(item, Response):
                        held, calls = parser.finish()
                        for chunk in held:
                            yield chunk
                        yield dataclasses.replace(item, parts=parser.parts(calls))
                    else:
                        for chunk in parser.push(item):
                            yield chunk

    @contextlib.asynccontextmanager
    async def _in_line(self, request: ChatRequest, user: str | None, replies: int = 1) -> AsyncIterator[tuple[Prompt, Places]]:
        """Places in line for ``replies`` replies to ``request`` (or the refusal, before any
        work), then the request prepared; the places are given up when the block ends."""
        with self.line.join(user, replies) as places:
            yield await self._preparing.run(user, self.prompts.prepare, request), places

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
    def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | Response]:
        """One reply: its text piece by piece, then its Response once the model finished on its
        own. Leaving early (a closed iterator, a cancelled task) stops the model."""

    async def _score(self, batch_input: list[str]) -> list[float]:
        """Backends that load reward models score with them; the others refuse such models at load."""
        raise UnsupportedError(f"The {self.name} engine does not score texts.")

    @abstractmethod
    async def close(self) -> None:
        """Free the model and everything the backend holds (memory, processes, threads)."""


def _with_parts(prompt: Prompt, response: Response) -> Response:
    parts = parse_reply(response.response_text, prompt.parse_tools, prompt.opens_reasoning)
    return dataclasses.replace(response, parts=parts)


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
