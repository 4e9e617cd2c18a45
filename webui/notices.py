"""The chat core's notices (chat/notices.py) as the page shows them: a toast in the user's language."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import gradio as gr

from chat.actions import Refused
from chat.notices import Notice
from chat.session import ChatSession

from .chat_view import render
from .languages import said


def toast(notice: Notice) -> None:
    """Show ``notice`` in the page of the event being handled (from its thread, or a thread it started)."""
    shown = gr.Info if notice.level == "info" else gr.Warning
    shown(words(notice))


def words(notice: Notice) -> str:
    """``notice`` in the user's language."""
    return said(notice.key, **notice.values)


def refusals_shown(handler: Callable[..., Any]) -> Callable[..., Any]:
    """A handler of a change of the conversation (chat/actions.py), or a stream of its updates,
    whose refusal is shown as a toast, the conversation drawn as it stays."""

    def refused_update(session: ChatSession, refused: Refused) -> dict[str, Any]:
        toast(refused.notice)
        return {"chatbot": render(session.tree)}

    if inspect.isasyncgenfunction(handler):
        @functools.wraps(handler)
        async def streamed(self: Any, session: ChatSession, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
            try:
                async for update in handler(self, session, *args, **kwargs):
                    yield update
            except Refused as refused:
                yield refused_update(session, refused)

        return streamed

    @functools.wraps(handler)
    def shown(self: Any, session: ChatSession, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return handler(self, session, *args, **kwargs)
        except Refused as refused:
            return refused_update(session, refused)

    return shown
