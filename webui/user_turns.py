"""The page's store work and conversation files, a few calls at a time for each user.

Gradio runs every user's page events at once (the sidebar's and the files' have no concurrency
limit: each touches only its own tab, and one at a time for all users, one person's export held up
everyone's), the plain-function ones on one pool of 40 threads that every user shares, the others
with the store calls they make in the event loop's few worker threads. One user who sends forty
imports, exports or page opens at once would hold every thread while the others' pages wait. So each such handler takes a turn of its user's first (a login, else the
browser's address, as in the model's waiting line): ``RUNNING`` of a user's calls run at once, the
next ``WAITING`` wait without holding a thread, and more are refused with a message that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import gradio as gr
from gradio.context import LocalContext

from engines.waiting_line import line_user

from .languages import said

RUNNING = 2
WAITING = 16


def page_user(page_request: gr.Request | None) -> str | None:
    """Whom a request from the page counts for (in the model's waiting line, and here): its
    login, else the address of its browser."""
    if page_request is None:
        return None
    return line_user(page_request.username, page_request.client.host if page_request.client else None)


class UserTurns:
    def __init__(self, running: int = RUNNING, waiting: int = WAITING) -> None:
        self.running = running
        self.waiting = waiting
        # Per user: the turns it has, and how many of its calls hold or wait for one.
        self._users: dict[str | None, tuple[asyncio.Semaphore, int]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, user: str | None) -> AsyncIterator[None]:
        turns, calls = self._users.get(user) or (asyncio.Semaphore(self.running), 0)
        if calls >= self.running + self.waiting:
            raise gr.Error(said("sidebar.too_many", count=self.running + self.waiting), print_exception=False)
        self._users[user] = (turns, calls + 1)
        try:
            async with turns:
                yield
        finally:
            turns, calls = self._users[user]
            if calls == 1:
                del self._users[user]
            else:
                self._users[user] = (turns, calls - 1)


TURNS = UserTurns()


def in_users_turn(handler: Callable) -> Callable:
    """``handler`` (a page event's) run in a turn of the user whose request it answers; a plain
    function in a worker thread then, so that waiting holds none."""

    if inspect.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def in_turn(*args: Any, **kwargs: Any) -> Any:
            async with users_turn():
                return await handler(*args, **kwargs)
    else:
        @functools.wraps(handler)
        async def in_turn(*args: Any, **kwargs: Any) -> Any:
            async with users_turn():
                return await anyio.to_thread.run_sync(functools.partial(handler, *args, **kwargs))
    return in_turn


def users_turn() -> contextlib.AbstractAsyncContextManager[None]:
    """A turn of the user of the page event being answered (Gradio keeps its request in a context variable)."""
    return TURNS.turn(page_user(LocalContext.request.get(None)))
