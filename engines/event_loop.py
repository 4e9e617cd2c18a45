"""The engine's own event loop, on a thread of its own, and how callers anywhere reach it.

An engine is driven from one loop only (some runtimes start tasks on the loop they are created
on). Sync callers block on it; async callers await it from whatever loop they run on (Gradio's,
FastAPI's, a test's). Cancelling a caller cancels its work on the engine's loop, and leaving a
stream early closes it there, which stops the model.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from .errors import ModelUnloadedError

T = TypeVar("T")


class EngineLoop:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chat-model-loop", daemon=True)
        self._thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run on the engine loop and block until done (for sync callers)."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("Sync ChatModel methods cannot be called from its own loop; use the a* methods.")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
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

    def iterate(self, stream: AsyncIterator[T]) -> Iterator[T]:
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
            self.call(_aclose(stream))

    async def relay(self, stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """``stream``, stepped on the engine loop, for a caller on any loop."""
        try:
            while True:
                try:
                    item = await self.run(_next(stream))
                except StopAsyncIteration:
                    return
                yield item
        finally:
            await self.run(_aclose(stream))

    def cancel_running(self) -> None:
        """Cancel whatever runs on the engine loop, and wait until it has unwound."""
        self.call(_cancel_running_requests())

    def stop(self) -> None:
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
