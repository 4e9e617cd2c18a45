"""The contract every backend implements, the reply it returns, and the request path they share.

``BaseEngine`` does everything that is the same on every backend: checking a request, rendering
and tokenizing the prompt, regularising media, fitting the context, waiting in line for the
model (engines/admission.py), parsing the reply into reasoning, content and tool calls. A backend
implements only its own part: ``_complete`` (whole replies), ``_stream`` (one reply, piece by
piece), ``close``, and ``_score`` if it scores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .admission import QueuePlace, WaitingLine
from .errors import UnsupportedError
from .generation_args import GenerationArgs
from .media import AudioInput, ImageInput, VideoInput
from .model_args import ModelArgs
from .prompt import Prompt, PromptBuilder
from .reply_parser import ReplyChunk, ReplyParser, ReplyParts, parse_reply
from .request import check_scores_request, refuse_unsupported_settings

MediaKind = Literal["image", "video", "audio"]


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
        return WaitingLine(self.model_args.max_concurrent, self.model_args.max_waiting)

    # ---- the request path shared by every backend

    async def prepare(
        self,
        messages: list[dict[str, Any]],
        system: str | None = None,
        tools: str | list[dict] | None = None,
        images: list[ImageInput] | None = None,
        videos: list[VideoInput] | None = None,
        audios: list[AudioInput] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        **generation: Any,
    ) -> Prompt:
        """The checked request as a prompt this backend can run, or a clear error before any work starts."""
        media = {"image": images, "video": videos, "audio": audios}
        request = self.prompts.request(messages, system, tools, media, chat_template_kwargs, generation)
        refuse_unsupported_settings(request.generation, self.name, self.generation_settings)
        return await self.prompts.prepare(request)

    def render_prompt(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                      chat_template_kwargs: dict[str, Any] | None = None, **generation: Any) -> str:
        """The exact prompt text the model would see for these messages (for inspection and tests)."""
        return self.prompts.render(self.prompts.request(messages, system, tools, {}, chat_template_kwargs, generation))

    async def chat(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                   images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                   audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                   **generation: Any) -> list[Response]:
        """All ``num_return_sequences`` replies, once complete."""
        prompt = await self.prepare(messages, system, tools, images, videos, audios, chat_template_kwargs, **generation)
        args = prompt.generation
        # Greedy decoding gives n identical replies; generating them once is the same answer.
        copies = args.num_return_sequences if args.greedy else 1
        async with self._turn():
            responses = await self._complete(prompt, args.replace(num_return_sequences=args.num_return_sequences // copies))
        return [_with_parts(prompt, response) for response in responses for _ in range(copies)]

    async def stream_chat(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                          images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                          audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                          on_finish: Callable[[Response], None] | None = None, **generation: Any) -> AsyncIterator[str]:
        """The first reply's text, piece by piece (num_return_sequences is ignored). Closing the
        iterator cancels generation. ``on_finish`` gets the whole reply (its token counts and
        finish reason) once the model has finished on its own, before the iterator ends."""
        prompt = await self.prepare(messages, system, tools, images, videos, audios, chat_template_kwargs, **generation)
        async with self._turn(), self._run(prompt) as items:
            async for item in items:
                if isinstance(item, Response):
                    if on_finish is not None:
                        on_finish(_with_parts(prompt, item))
                else:
                    yield item

    async def stream_reply(self, messages: list[dict[str, Any]], system: str | None = None, tools: str | list[dict] | None = None,
                           images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                           audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                           queue_places: bool = False, **generation: Any) -> AsyncIterator[QueuePlace | ReplyChunk | Response]:
        """The first reply as typed chunks (reasoning, content, tool-call text) as it is written,
        then the finished Response, whose ``parts`` hold the parsed tool calls. With
        ``queue_places``, a request that has to wait for the model first yields its QueuePlace
        each time the line moves, the last one (``ahead == 0``) as it starts."""
        prompt = await self.prepare(messages, system, tools, images, videos, audios, chat_template_kwargs, **generation)
        parser = ReplyParser(prompt.parse_tools, prompt.opens_reasoning)
        with self.line.join() as ticket:
            async with contextlib.aclosing(ticket.places()) as places:
                async for place in places:
                    if queue_places:
                        yield place
            async with self._run(prompt) as items:
                async for item in items:
                    if isinstance(item, Response):
                        held, calls = parser.finish()
                        for chunk in held:
                            yield chunk
                        yield dataclasses.replace(item, parts=parser.parts(calls))
                    else:
                        for chunk in parser.push(item):
                            yield chunk

    def _run(self, prompt: Prompt) -> contextlib.aclosing:
        """The backend's stream of the first reply, closed (so the model stops) however the caller leaves."""
        return contextlib.aclosing(self._stream(prompt, prompt.generation.replace(num_return_sequences=1)))

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """Wait in line for the model; the slot (or the place in line, if the caller gives up
        first) is freed when the block ends."""
        with self.line.join() as ticket:
            await ticket.wait()
            yield

    async def get_scores(self, batch_input: list[str], **kwargs: Any) -> list[float]:
        """Reward scores of whole texts, for reward (sequence-classification) models."""
        check_scores_request(self.can_generate, batch_input, kwargs)
        async with self._turn():
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
