"""One browser tab's session of a chat: its messages (every version, the branch shown among
them), the saved chat it writes them to, and what its reply is doing; and ``save``, through
which every save of them goes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from store import MessageTree

from .keeper import ChatKeeper
from .reply_state import ReplyState
from .turns import Turn


@dataclass
class ChatSession:
    """Kept in gr.State, so one per browser tab. The object is mutated in place while a reply
    streams: the Stop handler receives this same object and stops its ``reply``.
    ``tree``: the chat's messages, every version (regenerated, edited), and the branch shown;
    messages are added to it (``add``, or ``tree.add`` beside an earlier one), taken out with
    ``remove``, and another version is shown with ``tree.show``. ``chat_id`` names the saved
    chat it shows, and ``keeper`` writes it into the chat store as it changes
    (chat/keeper.py; None for a session not kept); ``reply``: what the tab's reply is
    doing (chat/reply_state.py: idle, answering, stopping, asking, running in the browser);
    ``pdfs_as_images``: PDFs attached in this tab go to a model that reads images as page images.
    ``left``: the tab has switched to another chat (or is switching): nothing of this session is
    shown any more, since a reply's late update or a refresh ending late would paint it over the
    chat now shown. ``always_allowed``: the tools allowed always, by chat id (chat/approval.py)."""

    tree: MessageTree[Turn] = field(default_factory=lambda: MessageTree.line([]))
    chat_id: str = ""
    reply: ReplyState = field(default_factory=ReplyState)
    keeper: ChatKeeper | None = None
    pdfs_as_images: bool = False
    left: bool = False
    always_allowed: dict[str, set[str]] = field(default_factory=dict)

    @property
    def turns(self) -> list[Turn]:
        """The turns of the branch shown, first message first (a new list, the turns themselves)."""
        return self.tree.shown_messages()

    def add(self, turn: Turn) -> int:
        """Put ``turn`` after the last one shown, and show it; its place in the tree."""
        return self.tree.add(turn, self.tree.shown)

    def remove(self, places: Iterable[int]) -> None:
        """Take messages ``places`` out, with every message after them, in every branch (out of
        the chat's store too, at the next save)."""
        if self.keeper is not None:
            self.keeper.remove(self.tree, places)
        else:
            self.tree.remove(places)


def save(session: ChatSession, system: str = "", tools: str = "") -> None:
    """Write what is unsaved of ``session``'s messages into its chat (``system`` and ``tools`` go
    with a chat written for the first time). It blocks on the store: the event loop calls ``kept``."""
    if session.keeper is not None:
        session.keeper.save(session.tree, system, tools)


async def kept(session: ChatSession, every: float = 0.0, system: str = "", tools: str = "") -> None:
    """``save`` in a thread (the store may be slow; the event loop streams meanwhile), unless
    the chat was saved less than ``every`` seconds ago."""
    if session.keeper is not None and time.monotonic() - session.keeper.last_save >= every:
        await asyncio.to_thread(save, session, system, tools)
