"""This browser's saved chats: each with its own messages, system prompt and tools.

The browser keeps them (browser_storage.py); while the page is open, each tab holds them in a
SavedChats of its own and hands the browser the whole list after every change. Only what a chat
needs is stored: its turns as JSON, with media named by the paths Gradio stored them under,
never the media themselves (localStorage holds a few megabytes).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

from pydantic import BaseModel, ValidationError

from .conversation import ChatSession, Turn, kept_media

TITLE_LENGTH = 60
# localStorage holds about 5 million characters per site, and encryption adds a third.
STORAGE_WARNING_CHARS = 3_000_000


class SavedChat(BaseModel):
    id: str
    title: str
    system: str = ""
    tools: str = ""
    updated: float = 0.0
    turns: list[Turn] = []


class SavedChats(BaseModel):
    """The chats of one browser, newest first, and the one its last page showed."""

    current: str = ""
    chats: list[SavedChat] = []

    @classmethod
    def from_browser(cls, value: Any) -> tuple[SavedChats, str]:
        """The chats the browser handed over, and a note if they could not be read (they are
        written by this app, but the person at the browser can change them)."""
        if value is None:
            return cls(), ""
        try:
            return cls.model_validate(value), ""
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return cls(), f"⚠ The chats saved in this browser could not be read ({where}: {first['msg']}), so the list starts empty."

    def for_browser(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_defaults=True)

    def find(self, chat_id: str) -> SavedChat | None:
        return next((chat for chat in self.chats if chat.id == chat_id), None)

    def open(self, chat_id: str, media_root: str) -> ChatSession:
        """A session showing saved chat ``chat_id`` (a new, empty chat if there is none such)."""
        chat = self.find(chat_id)
        if chat is None:
            return self.new_session()
        self.current = chat.id
        return ChatSession(turns=[kept_media(turn, media_root) for turn in chat.turns], chat_id=chat.id)

    def new_session(self) -> ChatSession:
        """A new chat: listed once it has a message."""
        self.current = uuid.uuid4().hex
        return ChatSession(chat_id=self.current)

    def keep(self, session: ChatSession, shown: str, system: str, tools: str) -> None:
        """Save the session's turns in its chat, and ``system`` and ``tools`` in chat ``shown``, the
        chat the page showed them with (both come from the page at once; the session may be a
        newer one by the time this runs, after a switch)."""
        chat = self.find(session.chat_id)
        if chat is None and session.turns:
            chat = SavedChat(id=session.chat_id, title=title_of(session.turns))
            self.chats.insert(0, chat)
        if chat is not None:
            turns = [turn.model_copy(deep=True) for turn in session.turns]
            if turns != chat.turns:
                chat.turns, chat.updated = turns, time.time()
                self.chats.sort(key=lambda c: c.updated, reverse=True)
        self.set_settings(shown, system, tools)

    def set_settings(self, chat_id: str, system: str, tools: str) -> bool:
        """Give a saved chat its system prompt and tools; false if there is no such chat (yet)."""
        chat = self.find(chat_id)
        if chat is not None:
            chat.system, chat.tools = system or "", tools or ""
        return chat is not None

    def rename(self, chat_id: str, title: str) -> str:
        """Rename a chat; what is wrong with the title, if anything."""
        chat = self.find(chat_id)
        title = " ".join(title.split())
        if chat is None:
            return "This chat is saved once it has a message: rename it then."
        if not title:
            return "A chat needs a title: write one, or keep the one it has."
        chat.title = title
        return ""

    def delete(self, chat_id: str) -> None:
        self.chats = [chat for chat in self.chats if chat.id != chat_id]

    def choices(self, query: str = "") -> list[tuple[str, str]]:
        """(title, id) of the chats whose title holds ``query``, whatever its case."""
        query = query.strip().casefold()
        return [(chat.title, chat.id) for chat in self.chats if query in chat.title.casefold()]

    def note(self) -> str:
        """What the page says under the list: where the chats are, and when they grow too large."""
        size = len(json.dumps(self.for_browser()))
        if size > STORAGE_WARNING_CHARS:
            return (f"⚠ The saved chats take {size / 1e6:.1f} MB of this browser's storage, near its limit of about 5 MB: "
                    "delete old chats (export those you want to keep), or the newest changes may not be saved.")
        count = len(self.chats)
        return f"{count} chat{'' if count == 1 else 's'}, kept in this browser." if count else "No saved chats yet: they are kept in this browser."


def title_of(turns: list[Turn]) -> str:
    """The first user message's first words, or its first file's name."""
    first = next((turn for turn in turns if turn.role == "user"), None)
    if first is None:
        return "New chat"
    text = " ".join(first.content.split()) or next((os.path.basename(path) for path in first.files), "New chat")
    return text if len(text) <= TITLE_LENGTH else text[: TITLE_LENGTH - 1].rstrip() + "…"

