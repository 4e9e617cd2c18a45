"""One tab's view of its user's saved chats, which the chat store on the server keeps: the
list (newest first, searched in titles and messages), the chat the tab shows, and opening,
renaming and deleting chats. Each chat keeps its own messages, system prompt and tools.

Whose chats they are (``owner``) is settled once, when the page opens (webui/chat_sidebar.py),
and kept on the server with the tab; nothing the page sends later changes it, and every call
to the store names it, so a chat id of another user's opens nothing.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from store import ChatInfo, ChatStore, MessageTree

from .keeper import ChatKeeper
from .notices import Notice, Tell, logged
from .session import ChatSession, save
from .turns import Turn

# How long a delete can be undone (and only until the same user's next delete): long enough to
# click Undo, short enough that a deleted chat's media do not linger.
UNDO_SECONDS = 10.0


class SavedChats:
    def __init__(self, store: ChatStore, owner: str, browser: str = "", current: str = "", setting_names: tuple[str, ...] = (), *,
                 upload_folder: str, tell: Tell = logged) -> None:
        """``setting_names``: the generation settings the page has controls for, which a chat keeps;
        ``upload_folder`` and ``tell``: the page's files and how to tell its user (chat/keeper.py)."""
        self.store = store
        self.upload_folder = upload_folder
        self.tell = tell
        self.owner = owner
        self.browser = browser
        self.current = current
        self.setting_names = setting_names
        # The list as the page last showed it, to tell when other tabs have changed it; and the
        # search and the store's list stamp when the tab last looked (list_changed).
        self.listed: list[tuple[str, str]] = []
        self.looked: tuple[str, tuple[Any, ...]] | None = None
        # The chat this tab deleted last, which Undo brings back; never a chat id from the page.
        self.deleted = ""
        # When this tab last saved a system prompt and tools as typed (the page's keep_settings).
        self.settings_saved = float("-inf")

    def for_browser(self) -> dict[str, str]:
        """What the browser keeps: its id, and the chat it shows."""
        return {"id": self.browser, "current": self.current}

    def find(self, chat_id: str) -> ChatInfo | None:
        return self.store.chat(self.owner, chat_id) if chat_id else None

    def open(self, chat_id: str, media_root: str) -> ChatSession:
        """A session of saved chat ``chat_id``, every version of its messages, showing the branch
        it last showed (a new, empty chat if this user has none such)."""
        stored = self.store.tree(self.owner, chat_id) if chat_id else MessageTree.line([])
        if not len(stored) and self.find(chat_id) is None:
            return self.new_session()
        self.current = chat_id
        keeper = self.keeper(chat_id)
        keeper.took(stored)
        return ChatSession(tree=keeper.turns_of(stored, media_root), chat_id=chat_id, keeper=keeper)

    def new_session(self) -> ChatSession:
        """A new chat: listed once it has a message."""
        self.current = uuid.uuid4().hex
        return ChatSession(chat_id=self.current, keeper=self.keeper(self.current))

    def keeper(self, chat_id: str) -> ChatKeeper:
        return ChatKeeper(self.store, self.owner, chat_id, upload_folder=self.upload_folder, tell=self.tell)

    def keep_apart(self, session: ChatSession) -> None:
        """Give a session whose chat was deleted elsewhere a chat of its own, written at its next
        save: the conversation on screen is not lost, and the deleted chat stays deleted."""
        session.chat_id = self.current = uuid.uuid4().hex
        session.keeper = self.keeper(session.chat_id)

    def add(self, tree: MessageTree[Turn], system: str = "", tools: str = "") -> ChatSession:
        """A new chat of every message of ``tree`` (an imported conversation, a chat the browser
        held), saved now. Raises what the store raises (OverQuota, a store that cannot be
        written): nothing is saved then."""
        session = self.new_session()
        session.tree = tree
        if len(tree):
            session.keeper.save_tree(tree, system, tools)
        return session

    def keep(self, session: ChatSession, shown: str, system: str, tools: str, generation: dict[str, Any] | None = None) -> None:
        """Save what is left unsaved of the session's turns, and ``system``, ``tools`` and the
        ``generation`` settings in chat ``shown``, the chat the page showed them with (both come
        from the page at once; the session may be a newer one by the time this runs, after a switch)."""
        save(session, system if shown == session.chat_id else "", tools if shown == session.chat_id else "")
        if session.keeper is not None and session.keeper.problem:  # the store cannot be written: the page says so already
            return
        self.set_settings(shown, system, tools, generation)

    def set_settings(self, chat_id: str, system: str, tools: str, generation: dict[str, Any] | None = None) -> bool:
        """Give a saved chat its system prompt, tools and generation settings; false if there is no such chat (yet)."""
        return self.store.set_settings(self.owner, chat_id, system or "", tools or "", generation)

    def rename(self, chat_id: str, title: str) -> Notice | None:
        """Rename a chat; what is wrong with the title, if anything."""
        title = " ".join(title.split())
        if self.find(chat_id) is None:
            return Notice("sidebar.rename_unsaved")
        if not title:
            return Notice("sidebar.title_needed")
        self.store.rename(self.owner, chat_id, title[:200])
        return None

    def delete(self, chat_id: str) -> bool:
        """Delete a chat so that ``undo_delete`` can bring it back for a while; false if it is not saved."""
        self.store.purge(time.time(), self.owner)
        self.purge_expired()
        deleted = self.store.delete(self.owner, chat_id)
        self.deleted = chat_id if deleted else ""
        return deleted

    def undo_delete(self) -> str:
        """Bring back the chat this tab deleted last; its id, or "" where it is too late."""
        chat_id, self.deleted = self.deleted, ""
        return chat_id if chat_id and self.store.undelete(self.owner, chat_id, time.time() - UNDO_SECONDS) else ""

    def purge_expired(self) -> None:
        """Remove for good every user's chats deleted longer ago than a delete can be undone."""
        self.store.purge(time.time() - UNDO_SECONDS)

    def newest(self) -> str:
        chats = self.store.chats(self.owner)
        return chats[0].id if chats else ""

    def choices(self, query: str = "") -> list[tuple[str, str]]:
        """(title, id) of the chats whose title or messages hold ``query``, whatever its case."""
        return [(chat.title, chat.id) for chat in self.store.chats(self.owner, query)]

    def list_changed(self, query: str) -> bool:
        """Whether the list (searched for ``query``) may have changed since this was last asked."""
        looked, self.looked = self.looked, (query, self.store.list_stamp(self.owner))
        return self.looked != looked
