"""The chats older versions kept in the browser (the page hands them over once, as it opens),
moved into the store, the newest on top, at most as many as an import may hold."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from store import MessageTree, OverQuota

from .notices import Notice
from .saved_chats import SavedChats
from .turns import Turn


class BrowserChat(BaseModel):
    id: str
    title: str
    system: str = ""
    tools: str = ""
    updated: float = 0.0
    turns: list[Turn] = []


class BrowserChats(BaseModel):
    """The chats older versions kept in the browser, newest first, and the one shown last."""

    current: str = ""
    chats: list[BrowserChat] = []


def move_in(chats: SavedChats, old: Any, most: int) -> list[Notice]:
    """Move the chats the browser kept into the store, oldest first so the newest stays on top, at
    most the ``most`` newest (a request can name a hundred thousand); what was moved, what was
    left out, or why they could not be read (they are written by this app, but the person at the
    browser can change them)."""
    if old is None:
        return []
    try:
        kept = BrowserChats.model_validate(old)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return [Notice("sidebar.move_unreadable", {"where": where, "problem": first["msg"]}, "warning")]
    moving = kept.chats[:most]
    current, moved, notices = chats.current, 0, []
    for chat in reversed(moving):
        try:
            added = chats.add(MessageTree.line([turn.model_copy(deep=True) for turn in chat.turns]), chat.system, chat.tools)
        except OverQuota as error:
            left = len(moving) - moved
            notices.append(Notice("sidebar.move_not_newest_one", {"error": str(error)}) if left == 1
                           else Notice("sidebar.move_not_newest", {"count": left, "error": str(error)}))
            break
        moved += 1
        if chat.id == kept.current:
            current = added.chat_id
        chats.rename(added.chat_id, chat.title)
    chats.current = current
    if moving:
        notices.insert(0, Notice("sidebar.moved_one", level="info") if moved == 1 else Notice("sidebar.moved", {"count": moved}, "info"))
    if left_out := len(kept.chats) - len(moving):
        notices.append(Notice("sidebar.move_left_out", {"count": left_out, "most": most}))
    return notices
