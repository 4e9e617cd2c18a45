"""Feed the page from a model stream without letting the page slow the model down."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

# One browser update per ~40 ms: Gradio re-processes the whole Chatbot and the browser
# re-renders the message on every update, so per-token updates fall seconds behind.
UPDATE_INTERVAL = 0.04

_END = object()
T = TypeVar("T")


async def throttled(
    stream: AsyncIterator[T], should_stop: Callable[[], bool], interval: float = UPDATE_INTERVAL
) -> AsyncIterator[list[T]]:
    """Yield the items gathered since the last yield, at most once per ``interval`` (the first
    item at once, for a quick first token). The model stream is drained by its own task, so it
    runs at full speed however slowly the caller consumes. Stopping (``should_stop()`` turning
    true, or the caller closing this generator) cancels that task, which closes the model stream
    and so stops generation in the engine."""
    queue: asyncio.Queue = asyncio.Queue()

    async def drain() -> None:
        try:
            async for piece in stream:
                queue.put_nowait(piece)
        except Exception as error:  # handed to the consumer, which re-raises it in its own task
            queue.put_nowait(error)
        finally:
            queue.put_nowait(_END)

    task = asyncio.create_task(drain())
    last_yield = 0.0
    try:
        finished = False
        while not finished:
            pending: list[T] = []
            deadline = None
            while True:
                if should_stop():
                    return
                timeout = interval if deadline is None else deadline - time.monotonic()
                if timeout <= 0 and pending:
                    break
                try:
                    item = await asyncio.wait_for(queue.get(), max(timeout, 0.001))
                except TimeoutError:
                    if pending:
                        break
                    continue
                if item is _END:
                    finished = True
                    break
                if isinstance(item, Exception):
                    raise item
                pending.append(item)
                if deadline is None:
                    deadline = max(time.monotonic(), last_yield + interval)
            if pending:
                last_yield = time.monotonic()
                yield pending
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
