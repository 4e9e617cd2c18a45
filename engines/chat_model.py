"""ChatModel: one facade over whichever engine is loaded, with sync and async methods.

The page, the API and the terminal chat use this class only; what they need to know about the
loaded model (its id, the media it reads, its generation defaults and the optional settings it
honours) is a property here.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar

from .backends import engine_class
from .backends.base import BaseEngine, MediaKind, Response
from .errors import ConfigError, ModelUnloadedError
from .generation_args import GenerationArgs
from .model_files import Progress
from .model_files.model_args import ModelArgs
from .prompt.media import AudioInput, ImageInput, VideoInput
from .prompt.reply_parser import ReplyChunk
from .waiting_line import QueuePlace, WaitingLine

T = TypeVar("T")
P = ParamSpec("P")
Messages = list[dict[str, Any]]
Tools = str | list[dict[str, Any]] | None


def split_args(args: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split one flat settings dict into model settings and generation settings."""
    args = dict(args or {})
    model_names, generation_names = set(ModelArgs.names()), set(GenerationArgs.names())
    unknown = sorted(set(args) - model_names - generation_names)
    if unknown:
        raise ConfigError(
            f"Unknown setting(s): {', '.join(unknown)}. Model settings: {', '.join(ModelArgs.names())}; "
            f"generation settings: {', '.join(GenerationArgs.names())}."
        )
    return (
        {k: v for k, v in args.items() if k in model_names},
        {k: v for k, v in args.items() if k in generation_names},
    )


def _blocking(method: Callable[Concatenate[ChatModel, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[ChatModel, P], T]:
    """The sync twin of an async method: runs it on the engine loop and waits."""

    @functools.wraps(method)
    def run(self: ChatModel, *args: P.args, **kwargs: P.kwargs) -> T:
        self._engine()  # an unloaded model says so, rather than its closed loop
        return self._call(method(self, *args, **kwargs))

    run.__doc__ = f"The blocking form of {method.__name__}."
    return run


def _blocking_stream(method: Callable[Concatenate[ChatModel, P], AsyncIterator[T]]) -> Callable[Concatenate[ChatModel, P], Iterator[T]]:
    """The sync twin of an async stream: iterates it on the engine loop."""

    @functools.wraps(method)
    def run(self: ChatModel, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._iterate(method(self, *args, **kwargs))

    run.__doc__ = f"The blocking form of {method.__name__}: leaving the loop early (break, Ctrl-C) stops the model."
    return run


class ChatModel:
    """Loads one model on one backend and serves it to sync and async callers.

    The engine lives on a background event loop thread owned by this object; the sync methods
    block on it and the async methods await it from whatever loop they run on (Gradio's,
    FastAPI's, a test's), so an engine never sees two loops.

    Chat methods take ``messages`` (``[{"role": ..., "content": str}]``), ``system``, ``tools``
    (function schemas, a list or JSON text), ``images``/``videos``/``audios``,
    ``chat_template_kwargs`` (variables for the model's template) and any GenerationArgs setting;
    ``user`` names whom a request counts for in the model's waiting line (a login name or a
    client's address; None for whoever uses this object directly).
    """

    def __init__(self, args: Mapping[str, Any] | None = None, progress: Progress | None = None) -> None:
        model_settings, self._generation_settings = split_args(args)
        self.model_args: ModelArgs = ModelArgs.build(**model_settings)
        GenerationArgs().replace(**self._generation_settings)  # a bad setting fails before the slow load
        engine_type = engine_class(self.model_args.backend)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chat-model-loop", daemon=True)
        self._thread.start()
        started = time.perf_counter()
        try:
            self.engine: BaseEngine | None = self._call(self._create(engine_type, progress))
        except BaseException:
            self._stop_loop()
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
        return self.model_args.model_id

    @property
    def display_name(self) -> str:
        return self.model_args.display_name

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

    def count_tokens(self, text: str) -> int:
        """How many tokens the model's tokenizer makes of ``text``, without special tokens."""
        return len(self._engine().tokenizer(text, add_special_tokens=False).input_ids)

    @property
    def line(self) -> WaitingLine:
        """The requests being answered (``line.running``) and those waiting (``line.waiting``)."""
        return self._engine().line

    def render_prompt(self, messages: Messages, system: str | None = None, tools: Tools = None,
                      chat_template_kwargs: dict[str, Any] | None = None, **generation: Any) -> str:
        """The exact prompt text the model would see for these messages."""
        return self._engine().render_prompt(messages, system, tools, chat_template_kwargs, **generation)

    # ---- async

    async def achat(self, messages: Messages, system: str | None = None, tools: Tools = None,
                    images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                    audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                    user: str | None = None, **generation: Any) -> list[Response]:
        """All ``num_return_sequences`` replies, once complete."""
        engine = self._engine()
        return await self._await(engine.chat(messages, system, tools, images, videos, audios, chat_template_kwargs, user, **generation))

    def astream_chat(self, messages: Messages, system: str | None = None, tools: Tools = None,
                     images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                     audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                     on_finish: Callable[[Response], None] | None = None, user: str | None = None,
                     **generation: Any) -> AsyncIterator[str]:
        """The reply's raw text piece by piece; ``on_finish`` gets the finished Response."""
        stream = self._engine().stream_chat(messages, system, tools, images, videos, audios, chat_template_kwargs, on_finish, user, **generation)
        return self._relay(stream)

    def astream_reply(self, messages: Messages, system: str | None = None, tools: Tools = None,
                      images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                      audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                      queue_places: bool = False, user: str | None = None,
                      **generation: Any) -> AsyncIterator[QueuePlace | ReplyChunk | Response]:
        """The reply as typed chunks (reasoning, content, tool-call text), then the finished
        Response with its parsed parts (tool calls included). With ``queue_places``, a request
        that waits for the model first yields its place in line as it changes."""
        stream = self._engine().stream_reply(messages, system, tools, images, videos, audios, chat_template_kwargs, queue_places, user,
                                             **generation)
        return self._relay(stream)

    def astream_replies(self, messages: Messages, system: str | None = None, tools: Tools = None,
                        images: list[ImageInput] | None = None, videos: list[VideoInput] | None = None,
                        audios: list[AudioInput] | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                        queue_places: bool = False, user: str | None = None,
                        **generation: Any) -> AsyncIterator[tuple[int, QueuePlace | ReplyChunk | Response]]:
        """All ``num_return_sequences`` replies side by side, as (reply index, item) pairs with
        the items of astream_reply; the request waits in line once for all of them."""
        stream = self._engine().stream_replies(messages, system, tools, images, videos, audios, chat_template_kwargs, queue_places, user,
                                               **generation)
        return self._relay(stream)

    async def aget_scores(self, batch_input: list[str], user: str | None = None, **kwargs: Any) -> list[float]:
        """Reward scores of whole texts, for reward models."""
        return await self._await(self._engine().get_scores(batch_input, user, **kwargs))

    # ---- sync

    chat = _blocking(achat)
    stream_chat = _blocking_stream(astream_chat)
    stream_reply = _blocking_stream(astream_reply)
    get_scores = _blocking(aget_scores)

    # ---- lifetime

    def close(self) -> None:
        """Stop what is running, free the engine and its memory; the ChatModel cannot be used afterwards."""
        engine, self.engine = self.engine, None
        if engine is not None:
            self._call(_cancel_running_requests())
            self._call(engine.close())
            del engine
        self._stop_loop()
        gc.collect()
        _return_freed_memory_to_os()

    def __enter__(self) -> ChatModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- plumbing

    def _engine(self) -> BaseEngine:
        if self.engine is None:
            raise ModelUnloadedError("No model is loaded: it was unloaded. Load a model first.")
        return self.engine

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run on the engine loop and block until done (for sync callers)."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("Sync ChatModel methods cannot be called from its own loop; use the a* methods.")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _iterate(self, stream: AsyncIterator[T]) -> Iterator[T]:
        """A sync iterator over ``stream``, which runs on the engine loop. Leaving early (break,
        an exception, Ctrl-C while a step is in flight) cancels that step, waits for the model
        to stop, and closes the stream."""
        step = None
        try:
            while True:
                step = asyncio.run_coroutine_threadsafe(_next(stream), self._loop)
                try:
                    item = step.result()
                except StopAsyncIteration:
                    return
                step = None
                yield item
        finally:
            if step is not None:
                step.cancel()
            self._call(_aclose(stream))

    async def _relay(self, stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """An engine stream, stepped on the engine loop, for a caller on any loop."""
        try:
            while True:
                try:
                    item = await self._await(_next(stream))
                except StopAsyncIteration:
                    return
                yield item
        finally:
            await self._await(_aclose(stream))

    async def _await(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run on the engine loop and await the result from the caller's loop.

        Cancelling the caller cancels the work on the engine loop (and so stops generation).
        """
        if asyncio.get_running_loop() is self._loop:
            return await coroutine
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                future.cancel()
                raise
            # Not our caller's cancellation: close() cancelled the work on the engine loop.
            raise ModelUnloadedError("The model was unloaded while this request was running.") from None

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()


async def _cancel_running_requests() -> None:
    running = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


async def _next(stream: AsyncIterator[T]) -> T:
    return await stream.__anext__()


async def _aclose(stream: AsyncIterator[T]) -> None:
    """Close once a cancelled ``__anext__`` has unwound: the engine's cleanup (waiting for the
    model to stop) is still running then, and aclose() would fail with "already running" and
    return before generation has really ended."""
    while getattr(stream, "ag_running", False):
        await asyncio.sleep(0.005)
    await stream.aclose()


def _return_freed_memory_to_os() -> None:
    """glibc keeps freed heap pages; trimming hands them back so unloading shows in RSS."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
