"""One tab's view of its user's saved chats, which the chat store on the server keeps: the
list (newest first, searched in titles and messages), the chat the tab shows, and opening,
renaming and deleting chats. Each chat keeps its own messages, system prompt and tools.

Whose chats they are (``owner``) is settled once, when the page opens (webui/chat_sidebar.py),
and kept on the server with the tab; nothing the page sends later changes it, and every call
to the store names it, so a chat id of another user's opens nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

from store import ChatInfo, ChatStore

from .chat_keeper import ChatKeeper, as_turn
from .conversation import ChatSession, Turn, kept_media


class SavedChats:
    def __init__(self, store: ChatStore, owner: str, browser: str = "", current: str = "", setting_names: tuple[str, ...] = ()) -> None:
        """``setting_names``: the generation settings the page has controls for, which a chat keeps."""
        self.store = store
        self.owner = owner
        self.browser = browser
        self.current = current
        self.setting_names = setting_names
        # The list as the page last showed it, to tell when other tabs have changed it.
        self.listed: list[tuple[str, str]] = []

    def for_browser(self) -> dict[str, str]:
        """What the browser keeps: its id, and the chat it shows."""
        return {"id": self.browser, "current": self.current}

    def find(self, chat_id: str) -> ChatInfo | None:
        return self.store.chat(self.owner, chat_id) if chat_id else None

    def open(self, chat_id: str, media_root: str) -> ChatSession:
        """A session showing saved chat ``chat_id`` (a new, empty chat if this user has none such)."""
        stored = self.store.messages(self.owner, chat_id) if chat_id else []
        if not stored and self.find(chat_id) is None:
            return self.new_session()
        self.current = chat_id
        known: dict[str, str] = {}
        turns = [as_turn(message, self.store, media_root, known) for message in stored]
        written = {message.id: {**message.data, "state": message.state} for message in stored}
        return ChatSession(turns=[kept_media(turn, media_root) for turn in turns], chat_id=chat_id,
                           keeper=ChatKeeper(self.store, self.owner, chat_id, written, known))

    def new_session(self) -> ChatSession:
        """A new chat: listed once it has a message."""
        self.current = uuid.uuid4().hex
        return ChatSession(chat_id=self.current, keeper=ChatKeeper(self.store, self.owner, self.current))

    def add(self, turns: list[Turn], system: str = "", tools: str = "") -> ChatSession:
        """A new chat of ``turns`` (an imported conversation, a chat the browser held), saved now."""
        session = self.new_session()
        session.turns = turns
        session.keeper.save(turns, system, tools)
        return session

    def keep(self, session: ChatSession, shown: str, system: str, tools: str, generation: dict[str, Any] | None = None) -> None:
        """Save what is left unsaved of the session's turns, and ``system``, ``tools`` and the
        ``generation`` settings in chat ``shown``, the chat the page showed them with (both come
        from the page at once; the session may be a newer one by the time this runs, after a switch)."""
        if session.keeper is not None:
            session.keeper.save(session.turns, system if shown == session.chat_id else "", tools if shown == session.chat_id else "")
            if session.keeper.problem:  # the store cannot be written: the page says so already
                return
        self.set_settings(shown, system, tools, generation)

    def set_settings(self, chat_id: str, system: str, tools: str, generation: dict[str, Any] | None = None) -> bool:
        """Give a saved chat its system prompt, tools and generation settings; false if there is no such chat (yet)."""
        return self.store.set_settings(self.owner, chat_id, system or "", tools or "", generation)

    def rename(self, chat_id: str, title: str) -> str:
        """Rename a chat; what is wrong with the title, if anything."""
        title = " ".join(title.split())
        if self.find(chat_id) is None:
            return "This chat is saved once it has a message: rename it then."
        if not title:
            return "A chat needs a title: write one, or keep the one it has."
        self.store.rename(self.owner, chat_id, title[:200])
        return ""

    def delete(self, chat_id: str) -> None:
        self.store.delete(self.owner, chat_id)

    def newest(self) -> str:
        chats = self.store.chats(self.owner)
        return chats[0].id if chats else ""

    def choices(self, query: str = "") -> list[tuple[str, str]]:
        """(title, id) of the chats whose title or messages hold ``query``, whatever its case."""
        return [(chat.title, chat.id) for chat in self.store.chats(self.owner, query)]

    def note(self) -> str:
        count = self.store.count(self.owner)
        where = "your login's" if self.owner.startswith("login:") else "this browser's"
        return f"{count} chat{'' if count == 1 else 's'}, kept on the server as {where}." if count else \
            f"No saved chats yet: they are kept on the server as {where}."
