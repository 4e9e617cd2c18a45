"""A reply as the page shows it while it is written (chat/reply.py writes it): the Chatbot's
messages at each change of its turn, the conversation above it drawn once (again only where the
conversation was made smaller to fit, and after the message's documents were read, a line
saying how far while they are), and the updates spaced so that the browser's redraw of a
long conversation does not take the model's CPU."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from chat.reply import Reply
from chat.streaming import PAGE_SHARE, UPDATE_INTERVAL

from .chat_view import document_line, render, render_turn

# What an update costs the browser for each message the Chatbot shows (Gradio's Chatbot
# re-normalises and redraws every message on each update, work the server never sees): about
# 0.3 ms on this machine's Chromium. Under 200 messages a 256-token reply took it 6.7-7.8 s of CPU
# at one update per 0.1 s, 3.6-5.2 s at one per 0.3 s, and the model beside it wrote 7 % faster.
BROWSER_SECONDS_PER_MESSAGE = 0.0003
# However long the conversation, the reply is still seen being written.
LONGEST_INTERVAL = 1.0


def update_interval(messages: int) -> float:
    """The interval between updates of a Chatbot showing ``messages``: UPDATE_INTERVAL, or longer
    where the browser's redraw of them all would take more than PAGE_SHARE of it."""
    return min(max(UPDATE_INTERVAL, BROWSER_SECONDS_PER_MESSAGE * messages / PAGE_SHARE), LONGEST_INTERVAL)


async def shown(reply: Reply, settings: dict[str, Any], user: str | None) -> AsyncIterator[list[dict[str, Any]]]:
    """The Chatbot's messages each time ``reply`` changes, as Reply.written writes it with ``settings`` for ``user``."""
    drawn_for, drawn = reply.before, render(reply.tree, reply.before)
    async for _ in reply.written(settings, user, update_interval(len(drawn))):
        if reply.reading is not None:
            drawn_for = None  # the message's documents change as they are read: drawn again after
            yield render(reply.tree, reply.before) + [document_line(reply.reading)]
            continue
        if reply.before != drawn_for:
            drawn_for, drawn = reply.before, render(reply.tree, reply.before)
        yield drawn if reply.place is None else drawn + render_turn(reply.tree, reply.place)
