"""A chat written into the store as it happens: the user's message when it is sent, the reply
while it streams (every few seconds) and when it ends, each message a row of its own.

A ChatKeeper belongs to one tab's session of one chat. It remembers each message as it last
wrote it, and a save writes only what changed since: new messages, changed ones, and the ones
the session no longer has (a regenerated reply, an undone message). Rows another tab added to
the same chat are never touched. Where the store cannot be written, the conversation goes on
in the page, which says so once, and the next save writes everything still unsaved.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

import gradio as gr
from sqlalchemy.exc import SQLAlchemyError

from store import ChatStore, MessageChanges, StoredMessage, StoreError

from .conversation import ChatSession, Turn

logger = logging.getLogger(__name__)

# How often a streaming reply is written: what a killed server loses at most.
SAVE_INTERVAL = 2.0
TITLE_LENGTH = 60


class ChatKeeper:
    def __init__(self, store: ChatStore, owner: str, chat_id: str, written: dict[int, dict[str, Any]] | None = None) -> None:
        self.store = store
        self.owner = owner
        self.chat_id = chat_id
        self.written = written or {}
        self.last_save = time.monotonic()
        self.problem = ""
        self._lock = threading.Lock()

    def save(self, turns: list[Turn], system: str = "", tools: str = "") -> None:
        """Write what changed in ``turns`` (``system`` and ``tools`` go with a chat written for the first time)."""
        with self._lock:
            self.last_save = time.monotonic()
            messages = [as_message(turn) for turn in turns]
            rows = {turn.row for turn in turns}
            changes = MessageChanges(
                added=[message for turn, message in zip(turns, messages) if turn.row is None],
                changed={turn.row: message for turn, message in zip(turns, messages) if turn.row is not None and self.written.get(turn.row) != message},
                removed=[row for row in self.written if row not in rows],
            )
            if not changes:
                return
            try:
                ids = self.store.write(self.owner, self.chat_id, changes, {"title": title_of(turns), "system": system, "tools": tools})
            except (SQLAlchemyError, StoreError) as error:
                self._failed(error)
                return
            for turn, row in zip([turn for turn in turns if turn.row is None], ids):
                turn.row = row
            for row in changes.removed:
                del self.written[row]
            self.written.update({turn.row: message for turn, message in zip(turns, messages)})
            if self.problem:
                self.problem = ""
                gr.Info("The chat is saved again.")

    def _failed(self, error: Exception) -> None:
        problem = str(getattr(error, "orig", None) or error).splitlines()[0]
        logger.warning("Could not save chat %s: %s", self.chat_id, problem)
        if not self.problem:
            gr.Warning(f"⚠ This chat could not be saved ({problem}). It stays on the page and goes on; it is saved again as soon as "
                       "the store can be written. Export it (Conversation file) to keep a copy meanwhile.")
        self.problem = problem


async def kept(session: ChatSession, every: float = 0.0, system: str = "", tools: str = "") -> None:
    """Save ``session``'s chat, in a thread (the store may be slow; the event loop streams
    meanwhile), unless it was saved less than ``every`` seconds ago."""
    keeper = session.keeper
    if keeper is not None and time.monotonic() - keeper.last_save >= every:
        await asyncio.to_thread(keeper.save, list(session.turns), system, tools)


def kept_now(session: ChatSession) -> None:
    """Save ``session``'s chat at once (where nothing can be awaited: a reply closed mid-stream)."""
    if session.keeper is not None:
        session.keeper.save(list(session.turns))


def as_message(turn: Turn) -> dict[str, Any]:
    """A turn as the store keeps it: what the page keeps of it, and its ``state``."""
    return {**turn.model_dump(mode="json", exclude_defaults=True), "role": turn.role, "content": turn.content, "state": state_of(turn)}


def state_of(turn: Turn) -> str:
    if turn.writing:
        return "writing"
    if turn.error:
        return "error"
    if turn.stopped:
        return "stopped"
    return "length" if turn.stats is not None and turn.stats.finish_reason == "length" else "done"


def as_turn(message: StoredMessage) -> Turn:
    """A stored message as a turn; a reply still marked writing was cut short (a reload, a killed
    server) and shows as stopped there."""
    turn = Turn.model_validate(message.data)
    turn.row = message.id
    turn.stopped = turn.stopped or message.state == "writing"
    return turn


def title_of(turns: list[Turn]) -> str:
    """The first user message's first words, or its first file's name."""
    first = next((turn for turn in turns if turn.role == "user"), None)
    if first is None:
        return "New chat"
    text = " ".join(first.content.split()) or next((os.path.basename(path) for path in first.files), "New chat")
    return text if len(text) <= TITLE_LENGTH else text[: TITLE_LENGTH - 1].rstrip() + "…"
