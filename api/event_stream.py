"""The server-sent events of a streamed completion, chat or text: what both send around the
replies' own chunks. The first reply item is awaited before the response starts, so a request
the engine refuses gets a proper error status; an error later, once the response has started,
is sent as an event of its own; an OpenAI stream ends with [DONE]; and the replies are closed however
it ends (a client gone mid-stream included), so the engine stops writing them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

from .errors import APIError, from_exception

Item = TypeVar("Item")


async def first_of(replies: AsyncIterator[Item]) -> Item:
    """The replies' first item; the replies closed where there is none (the request refused)."""
    try:
        return await anext(replies)
    except BaseException:
        await replies.aclose()
        raise


def openai_failure(error: APIError) -> str:
    return sse_data(error.body())


async def event_stream(replies: AsyncIterator[Item], first: Item, opening: Iterable[str],
                       events: Callable[[Item], Iterator[str]], complete: Callable[[], bool],
                       failure: Callable[[APIError], str] = openai_failure,
                       ending: str | Callable[[], Awaitable[str]] = "data: [DONE]\n\n") -> AsyncIterator[str]:
    """``opening``, then the ``events`` of each item, ``first`` first, until the stream is
    ``complete`` (every reply finished) or the replies fail (the ``failure`` event); then
    ``ending`` (Chat Completions' [DONE]; Anthropic's streams end with their last event; a
    Responses stream's last event is made once the response is kept)."""
    try:
        for event in opening:
            yield event
        item = first
        while True:
            for event in events(item):
                yield event
            if complete():
                break
            try:
                item = await anext(replies)
            except Exception as error:
                yield failure(from_exception(error))
                break
        yield ending if isinstance(ending, str) else await ending()
    finally:
        await replies.aclose()


def sse_data(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
