"""Feed the page from a model stream without letting the page slow the model down."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

# One browser update per ~100 ms: Gradio re-processes the whole Chatbot and the browser
# re-renders the message on every update, so per-token updates fall seconds behind. The browser
# shares the machine with the model: at 40 ms Chromium took 4.5-5.7 s of CPU to show a 300-token
# reply, at 100 ms 2.7-3.1 s, and the reply was done 6 % sooner (llama.cpp, 2 cores).
UPDATE_INTERVAL = 0.1
# The share of the time the page's own work on updates may take. That work grows with the
# conversation (Gradio re-processes every message on each update), and on a small machine it
# takes CPU from the model; past this share, updates are spaced further apart instead.
PAGE_SHARE = 0.2

_END = object()
T = TypeVar("T")


async def throttled(
    stream: AsyncIterator[T], should_stop: Callable[[], bool], interval: float = UPDATE_INTERVAL,
    arrived: Callable[[T], None] = lambda item: None,
) -> AsyncIterator[list[T]]:
    """Yield the items gathered since the last yield, at most once per ``interval`` (the first
    item at once, for a quick first token), or less often where the caller's handling of each
    yield takes more than PAGE_SHARE of the time between them. The model stream is drained by its own task, so it
    runs at full speed however slowly the caller consumes, and hands each item to ``arrived`` as
    it comes (the reply's clock: when the model wrote it, not when the page showed it). Stopping
    (``should_stop()`` turning true, or the caller closing this generator) cancels that task,
    which closes the model stream and so stops generation in the engine (docs/life_of_a_token.md)."""
    queue: asyncio.Queue = asyncio.Queue()

    async def drain() -> None:
        try:
            async for piece in stream:
                arrived(piece)
                queue.put_nowait(piece)
        except Exception as error:  # handed to the consumer, which re-raises it in its own task
            queue.put_nowait(error)
        finally:
            queue.put_nowait(_END)

    task = asyncio.create_task(drain())
    last_yield, spacing = 0.0, interval
    try:
        finished = False
        while not finished:
            pending: list[T] = []
            deadline = None
            while True:
                if should_stop():
                    return
                timeout = spacing if deadline is None else deadline - time.monotonic()
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
                    deadline = max(time.monotonic(), last_yield + spacing)
            if pending:
                yielded = time.monotonic()
                yield pending
                last_yield = time.monotonic()
                spacing = max(interval, (last_yield - yielded) / PAGE_SHARE)
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
