"""One browser tab's session of a chat: the turns it shows, the saved chat it writes them to,
and whether a reply is being written; and ``save``, through which every save of them goes."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from store import MessageTree

from .chat_keeper import ChatKeeper
from .conversation import Turn
from .tool_approval import Question


@dataclass
class ChatSession:
    """Kept in gr.State, so one per browser tab. The object is mutated in place while a reply
    streams: the Stop handler receives this same object and flips ``stop_requested``.
    ``chat_id`` names the saved chat it shows, and ``keeper`` writes it into the chat store as
    it changes (webui/chat_keeper.py; None for a session not kept); ``answering`` is true while
    a reply is written; ``pdfs_as_images``: PDFs attached in this tab go to a model that reads
    images as page images; ``imported``: every message of a conversation file just imported
    (webui/conversation_file.py), until the sidebar writes them into a chat of their own.
    ``left``: the tab has switched to another chat (or is switching): nothing of this session is
    shown any more, since a reply's late update or a refresh ending late would paint it over the
    chat now shown. ``question``: what the reply waits on the user's say about before tools run,
    and ``always_allowed`` the tools allowed always, by chat id (webui/tool_approval.py);
    ``browser_runs``: the python calls that wait for the page's browser to run their code, by the
    code's key (webui/python_in_browser.py)."""

    turns: list[Turn] = field(default_factory=list)
    stop_requested: bool = False
    chat_id: str = ""
    answering: bool = False
    keeper: ChatKeeper | None = None
    pdfs_as_images: bool = False
    imported: MessageTree[Turn] | None = None
    left: bool = False
    question: Question | None = None
    browser_runs: dict[str, asyncio.Future] = field(default_factory=dict)
    always_allowed: dict[str, set[str]] = field(default_factory=dict)


def save(session: ChatSession, system: str = "", tools: str = "") -> None:
    """Write what is unsaved of ``session``'s turns into its chat (``system`` and ``tools`` go
    with a chat written for the first time). It blocks on the store: the event loop calls ``kept``."""
    if session.keeper is not None:
        session.keeper.save(list(session.turns), system, tools)


async def kept(session: ChatSession, every: float = 0.0, system: str = "", tools: str = "") -> None:
    """``save`` in a thread (the store may be slow; the event loop streams meanwhile), unless
    the chat was saved less than ``every`` seconds ago."""
    if session.keeper is not None and time.monotonic() - session.keeper.last_save >= every:
        await asyncio.to_thread(save, session, system, tools)
