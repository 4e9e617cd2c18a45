"""ChatModel: one facade over whichever engine is loaded, with sync and async methods.

The page, the API and the terminal chat use this class only; what they need to know about the
loaded model (its id, the media it reads, its generation defaults and the optional settings it
honours) is a property here. Each chat method takes one ChatRequest (engines/request.py), as its
door built it, and hands it to the engine unchanged; Python callers may give the messages and
ChatRequest.build's keywords instead, and the request is built here.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from .backends import engine_class
from .backends.base import BaseEngine, Response
from .compaction import Compacting, Compaction, Summaries, fitted
from .errors import ConfigError, ContextLearnedError, ModelUnloadedError
from .event_loop import EngineLoop
from .freed_memory import return_freed_memory_to_os
from .generation_args import GenerationArgs
from .logprobs import TokenLogprobs
from .model_files import Progress
from .model_files.model_args import LoadSettings, ModelArgs
from .prompt.reply_parser import ReplyChunk
from .reply_meter import ReplyMeter
from .reply_traces import trace_reply
from .request import ChatRequest, MediaKind
from .waiting_line import QueuePlace, WaitingLine

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

T = TypeVar("T")
P = ParamSpec("P")
Messages = list[dict[str, Any]]


def as_request(request: ChatRequest | Messages, options: dict[str, Any]) -> ChatRequest:
    """``request`` as it is, or built from messages and ChatRequest.build's keywords."""
    if not isinstance(request, ChatRequest):
        return ChatRequest.build(request, **options)
    if options:
        raise ConfigError(f"Give a ChatRequest alone, or messages with options ({', '.join(sorted(options))}), not both.")
    return request


def _blocking(method: Callable[Concatenate[ChatModel, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[ChatModel, P], T]:
    """The sync twin of an async method: runs it on the engine loop and waits."""

    @functools.wraps(method)
    def run(self: ChatModel, *args: P.args, **kwargs: P.kwargs) -> T:
        self._engine()  # an unloaded model says so, rather than its closed loop
        return self._loop.call(method(self, *args, **kwargs))

    run.__doc__ = f"The blocking form of {method.__name__}."
    return run


def _blocking_stream(method: Callable[Concatenate[ChatModel, P], AsyncIterator[T]]) -> Callable[Concatenate[ChatModel, P], Iterator[T]]:
    """The sync twin of an async stream: iterates it on the engine loop."""

    @functools.wraps(method)
    def run(self: ChatModel, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self.iterate(method(self, *args, **kwargs))

    run.__doc__ = f"The blocking form of {method.__name__}: leaving the loop early (break, Ctrl-C) stops the model."
    return run


class ChatModel:
    """Loads one model on one backend and serves it to sync and async callers.

    The engine lives on a background event loop thread owned by this object (engines/event_loop.py);
    the sync methods block on it and the async methods await it from whatever loop they run on.

    Chat methods take a ChatRequest, or the messages (``[{"role": ..., "content": str}]``) with
    ChatRequest.build's keywords: ``system``, ``tools``, ``images``/``videos``/``audios``,
    ``chat_template_kwargs``, ``user`` (whom the request counts for in the model's waiting line)
    and any GenerationArgs setting.
    """

    def __init__(self, args: Mapping[str, Any] | LoadSettings | None = None, progress: Progress | None = None) -> None:
        settings = args if isinstance(args, LoadSettings) else LoadSettings.check(args)
        self.model_args: ModelArgs = settings.model
        self._generation_settings = settings.generation
        engine_type = engine_class(self.model_args.backend)
        self._holds = 0
        self._holds_lock = threading.Lock()
        self._summaries = Summaries()
        # The model that writes this one's summaries where the operator chose one (LoadedModels sets it).
        self.summarizer: Callable[[], ChatModel | None] = lambda: None
        # What its replies took, for operators (api/metrics.py).
        self.meter = ReplyMeter()
        # Where its replies' spans go, where the operator traces (LoadedModels sets it: engines/reply_traces.py).
        self.tracer: Callable[[], Tracer | None] = lambda: None
        self._loop = EngineLoop()
        started = time.perf_counter()
        try:
            self.engine: BaseEngine | None = self._loop.call(self._create(engine_type, progress))
        except BaseException:
            self._loop.stop()
            raise
        self.load_seconds = time.perf_counter() - started

    async def _create(self, engine_type: type[BaseEngine], progress: Progress | None) -> BaseEngine:
        # Built on the engine's own loop: some runtimes start tasks on the running loop as they start.
        return engine_type(self.model_args, self._generation_settings, progress)

    # ---- what is loaded

    @property
    def backend(self) -> str:
        return self.model_args.backend

    @property
    def backend_reason(self) -> str | None:
        """Why the app chose this backend, when the user left it to the app."""
        return self.model_args.backend_reason

    @property
    def model_id(self) -> str:
        """The model's name in the API."""
        return self.model_args.model_id if self.engine is None else self.engine.model_id

    @property
    def display_name(self) -> str:
        return self.model_args.display_name

    @property
    def prompt_cache(self) -> dict[str, int] | None:
        """What the prompt cache holds: conversations, bytes in memory and on disk, hits (None without one)."""
        return self._engine().prompt_cache

    @property
    def memory_bytes(self) -> int | None:
        """What the model holds in memory, as its backend can tell it (None where it cannot)."""
        return self._engine().memory_bytes

    @property
    def media_kinds(self) -> frozenset[MediaKind]:
        """What the model reads besides text."""
        return self._engine().media_kinds

    @property
    def generation_defaults(self) -> GenerationArgs:
        """The model's own generation settings (its generation_config.json), with those given at load."""
        return self._engine().generation_defaults

    @property
    def generation_settings(self) -> frozenset[str]:
        """The optional generation settings (GenerationArgs.OPTIONAL) this backend honours."""
        return self._engine().generation_settings

    @property
    def context_length(self) -> int | None:
        """Longest prompt plus reply, in tokens (None: no limit known)."""
        return self._engine().prompts.context_length

    @property
    def steers_reasoning(self) -> bool:
        """Whether the model's chat template reads how much to reason (reasoning_effort, or a
        thinking switch); True where a remote server renders the template (it decides)."""
        template = getattr(self._engine().prompts, "template", None)
        return template is None or "reasoning_effort" in template or "enable_thinking" in template

    def count_tokens(self, text: str) -> int:
        """How many tokens the model's tokenizer makes of ``text``, without special tokens."""
        return self._engine().count_tokens(text)

    @property
    def counts_prompts_exactly(self) -> bool:
        """Whether count_prompt_tokens is the model's own count, not an estimate (remote servers that do not count)."""
        return self._engine().counts_prompts_exactly

    def count_prompt_tokens(self, request: ChatRequest | Messages, **options: Any) -> int:
        """How many tokens the prompt of this request is."""
        return self._engine().count_prompt_tokens(as_request(request, options))

    @property
    def line(self) -> WaitingLine:
        """The requests being answered (``line.running``) and those waiting (``line.waiting``)."""
        return self._engine().line

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The model in use until the block ends, also while no request of it is in its line: a
        reply that runs tools holds it from its first answer to its last, so that it is never
        unloaded as idle while a tool runs or a call waits for the user's say (LoadedModels)."""
        with self._holds_lock:
            self._holds += 1
        try:
            yield
        finally:
            with self._holds_lock:
                self._holds -= 1

    @property
    def in_use(self) -> bool:
        """A request being answered or waiting, or a reply holding the model (``held``)."""
        lines = {self.line, self._engine().background_line}
        return self._holds > 0 or any(line.running or line.waiting for line in lines)

    def render_prompt(self, request: ChatRequest | Messages, **options: Any) -> str:
        """The exact prompt text the model would see for this request."""
        return self._engine().render_prompt(as_request(request, options))

    # ---- async

    async def achat(self, request: ChatRequest | Messages, **options: Any) -> list[Response]:
        """All ``num_return_sequences`` replies, once complete."""
        request = as_request(request, options)
        responses = await self._loop.run(self._engine().chat(request))
        for response in responses:
            self.meter.replied(response)
        return responses

    async def astream_replies(self, request: ChatRequest | Messages, progress: bool = False, raw: bool = False,
                              **options: Any) -> AsyncIterator[tuple[int, QueuePlace | ReplyChunk | str | TokenLogprobs | Response]]:
        """All ``num_return_sequences`` replies side by side, as (reply index, item) pairs: each
        reply as typed chunks (reasoning, content, tool-call text), then its finished Response with
        its parsed parts (tool calls included); where the request asks for logprobs, each token's
        TokenLogprobs no later than its text. With ``progress``, a request that waits for the
        model first yields its place in line as it changes (QueuePlace), then how far a long prompt
        has been read (PromptRead, on backends that read it piece by piece). With ``raw``, each reply's text comes
        as the model wrote it (str pieces) rather than as typed chunks. Where the request's
        context_policy made the conversation smaller to fit, a Compaction comes first (index 0), and
        with ``progress`` a Compacting before it (engines/compaction.py). Every stream below is this one."""
        request = as_request(request, options)
        # A server that had not said its context may refuse the prompt as longer, saying it (before
        # writing anything): fitted to it then, the request goes once more.
        once_more = self.context_length is None and (request.context_policy or "refuse") != "refuse"
        for last_try in ((False, True) if once_more else (True,)):
            try:
                async with contextlib.aclosing(self._fitted_replies(request, progress, raw)) as replies:
                    async for pair in replies:
                        yield pair
                return
            except ContextLearnedError:
                if last_try:
                    raise

    async def _fitted_replies(self, request: ChatRequest, progress: bool,
                              raw: bool) -> AsyncIterator[tuple[int, QueuePlace | ReplyChunk | str | TokenLogprobs | Response | Compacting | Compaction]]:
        async for item in fitted(self, request, self._summaries, self.summarizer):
            if isinstance(item, ChatRequest):
                request = item
            elif progress or isinstance(item, Compaction):
                yield 0, item
        asked, first_tokens = time.monotonic(), {}
        async with contextlib.aclosing(self._loop.relay(self._engine().stream_replies(request, progress, raw))) as replies:
            async for pair in replies:
                index, item = pair
                if isinstance(item, ReplyChunk | str):
                    first_tokens.setdefault(index, time.monotonic())
                elif isinstance(item, Response):
                    done = time.monotonic()
                    first = first_tokens.get(index, done)
                    self.meter.replied(item, first - asked, done - first)
                    if (tracer := self.tracer()) is not None:
                        trace_reply(tracer, self.model_id, self.backend, item, asked, first, done)
                yield pair

    async def astream_reply(self, request: ChatRequest | Messages, progress: bool = False,
                            **options: Any) -> AsyncIterator[QueuePlace | ReplyChunk | TokenLogprobs | Response]:
        """The first reply as astream_replies gives it (num_return_sequences is ignored)."""
        request = as_request(request, options).with_generation(num_return_sequences=1)
        async with contextlib.aclosing(self.astream_replies(request, progress)) as replies:
            async for _, item in replies:
                yield item

    async def astream_chat(self, request: ChatRequest | Messages, on_finish: Callable[[Response], None] | None = None,
                           **options: Any) -> AsyncIterator[str]:
        """The first reply's raw text, piece by piece, as the model wrote it (num_return_sequences
        is ignored); ``on_finish`` gets the finished Response once the model has finished on its own."""
        request = as_request(request, options).with_generation(num_return_sequences=1)
        async with contextlib.aclosing(self._loop.relay(self._engine().stream_replies(request, raw=True))) as replies:
            async for _, item in replies:
                if isinstance(item, str):
                    yield item
                elif isinstance(item, Response) and on_finish is not None:
                    on_finish(item)

    async def aget_scores(self, batch_input: list[str], user: str | None = None, **kwargs: Any) -> list[float]:
        """Reward scores of whole texts, for reward models."""
        return await self._loop.run(self._engine().get_scores(batch_input, user, **kwargs))

    # ---- sync

    chat = _blocking(achat)
    stream_chat = _blocking_stream(astream_chat)
    stream_reply = _blocking_stream(astream_reply)
    get_scores = _blocking(aget_scores)

    def iterate(self, stream: AsyncIterator[T]) -> Iterator[T]:
        """The blocking form of ``stream``, an async stream built on this model's a* methods (the
        agent loop's, tools/agent_loop.py: stream_reply_with_tools), as stream_reply is of
        astream_reply: it runs on the engine loop, and leaving early (break, Ctrl-C) stops the model."""
        return self._loop.iterate(stream)

    # ---- lifetime

    def close(self) -> None:
        """Stop what is running, free the engine and its memory; the ChatModel cannot be used afterwards."""
        engine, self.engine = self.engine, None
        if engine is not None:
            self._loop.cancel_running()
            self._loop.call(engine.close())
            del engine
        self._loop.stop()
        gc.collect()
        return_freed_memory_to_os()

    def __enter__(self) -> ChatModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _engine(self) -> BaseEngine:
        if self.engine is None:
            raise ModelUnloadedError("No model is loaded: it was unloaded. Load a model first.")
        return self.engine


