"""ChatModel: one facade over whichever engine is loaded, with sync and async methods."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from .backends import engine_class
from .base import BaseEngine, Response
from .errors import ConfigError, ModelUnloadedError
from .generation_args import GenerationArgs
from .model_args import ModelArgs
from .model_files import Progress

T = TypeVar("T")


def split_args(args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split one flat settings dict into model settings and generation settings."""
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


class ChatModel:
    """Loads one model on one backend and serves it to sync and async callers.

    The engine lives on a background event loop thread owned by this object; the sync methods
    block on it and the async methods await it from whatever loop they run on (Gradio's,
    FastAPI's, a test's), so an engine never sees two loops.
    """

    def __init__(self, args: dict[str, Any] | None = None, progress: Progress | None = None) -> None:
        model_settings, self._generation_settings = split_args(dict(args or {}))
        self.model_args = ModelArgs(**model_settings)
        engine_type = engine_class(self.model_args.infer_backend)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chat-model-loop", daemon=True)
        self._thread.start()
        try:
            self.engine: BaseEngine | None = self._call(self._create(engine_type, progress))
        except BaseException:
            self._stop_loop()
            raise

    async def _create(self, engine_type: type[BaseEngine], progress: Progress | None) -> BaseEngine:
        # Built on the engine's own loop: some runtimes start tasks on the running loop as they start.
        return engine_type(self.model_args, self._generation_settings, progress)

    # ---- async

    async def achat(self, messages, system=None, tools=None, images=None, videos=None, audios=None, **generation) -> list[Response]:
        engine = self._engine()
        return await self._await(engine.chat(messages, system, tools, images, videos, audios, **generation))

    async def astream_chat(self, messages, system=None, tools=None, images=None, videos=None, audios=None, on_finish=None, **generation) -> AsyncIterator[str]:
        stream = self._engine().stream_chat(messages, system, tools, images, videos, audios, on_finish, **generation)
        try:
            while True:
                try:
                    piece = await self._await(_next(stream))
                except StopAsyncIteration:
                    return
                yield piece
        finally:
            await self._await(_aclose(stream))

    async def aget_scores(self, batch_input: list[str], **kwargs: Any) -> list[float]:
        return await self._await(self._engine().get_scores(batch_input, **kwargs))

    # ---- sync

    def chat(self, messages, system=None, tools=None, images=None, videos=None, audios=None, **generation) -> list[Response]:
        return self._call(self._engine().chat(messages, system, tools, images, videos, audios, **generation))

    def stream_chat(self, messages, system=None, tools=None, images=None, videos=None, audios=None, on_finish=None, **generation) -> Iterator[str]:
        stream = self._engine().stream_chat(messages, system, tools, images, videos, audios, on_finish, **generation)
        try:
            while True:
                try:
                    yield self._call(_next(stream))
                except StopAsyncIteration:
                    return
        finally:
            self._call(stream.aclose())

    def get_scores(self, batch_input: list[str], **kwargs: Any) -> list[float]:
        return self._call(self._engine().get_scores(batch_input, **kwargs))

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
