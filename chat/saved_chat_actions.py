"""What a user does to their saved chats (chat/saved_chats.py), as plain functions: open a new
chat or another one (leaving the one shown saved, its reply stopped), delete one and undo that,
import an archive of chats, and take in what their other tabs and devices wrote into the chat
shown. Each returns what the tab shows now, or raises Refused (chat/actions.py) with why not;
the page draws it. Store failures are raised as the store raises them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal

from sqlalchemy.exc import SQLAlchemyError

from engines import ChatError
from limits import Limits
from store import MessageTree, OverQuota, StoreError

from .actions import Refused
from .chats_import import chats_in_archive
from .keeper import ChatGone
from .notices import Notice
from .saved_chats import UNDO_SECONDS, SavedChats
from .session import ChatSession
from .turns import Turn

# How long leaving a chat waits for its stopped reply to end before it saves what there is.
STOP_WAIT_SECONDS = 10.0


async def stopped(session: ChatSession) -> None:
    """Stop the session's reply, if one is being written, and wait for it to end."""
    if not session.reply.answering:
        return
    session.reply.stop()
    deadline = asyncio.get_running_loop().time() + STOP_WAIT_SECONDS
    while session.reply.answering and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    # Cancelled by the page rather than stopped, the reply was not marked: it was cut short all the same.
    if session.turns and session.turns[-1].role == "assistant":
        session.turns[-1].stopped = True


async def leave(chats: SavedChats, session: ChatSession, shown: str, system: str, tools: str) -> None:
    """Stop the reply of the chat a tab leaves, and save it with the ``system`` prompt and
    ``tools`` the page showed with chat ``shown`` (SavedChats.keep)."""
    await stopped(session)
    await asyncio.to_thread(chats.keep, session, shown, system, tools)


async def new_chat(chats: SavedChats, session: ChatSession, shown: str, system: str, tools: str) -> ChatSession:
    await leave(chats, session, shown, system, tools)
    return chats.new_session()


async def switch_chat(chats: SavedChats, session: ChatSession, shown: str, system: str, tools: str, chosen: str) -> ChatSession:
    await leave(chats, session, shown, system, tools)
    return await asyncio.to_thread(chats.open, chosen, chats.upload_folder)


async def delete_chat(chats: SavedChats, session: ChatSession) -> tuple[ChatSession, Notice | None]:
    """Delete the chat shown, stopping its reply: the newest chat left (or a new one), and the
    note that Undo brings it back for a while (none where the chat was never saved)."""
    await stopped(session)

    def deleted() -> tuple[ChatSession, Notice | None]:
        chat = chats.find(session.chat_id)
        done = chats.delete(session.chat_id)
        newest = chats.open(chats.newest(), chats.upload_folder)
        seconds = f"{UNDO_SECONDS:.0f}"
        if not done:
            return newest, None
        if chat is None:  # saved in another tab between the look and the delete
            return newest, Notice("sidebar.deleted_untitled", {"seconds": seconds}, "info")
        return newest, Notice("sidebar.deleted", {"title": chat.title, "seconds": seconds}, "info")

    return await asyncio.to_thread(deleted)


async def undo_delete(chats: SavedChats, session: ChatSession, shown: str, system: str, tools: str) -> ChatSession:
    """The chat this tab deleted last, brought back; the chat shown before stays saved."""
    await leave(chats, session, shown, system, tools)
    chat_id = await asyncio.to_thread(chats.undo_delete)
    if not chat_id:
        raise Refused(Notice("sidebar.too_late", {"seconds": f"{UNDO_SECONDS:.0f}"}))
    return await asyncio.to_thread(chats.open, chat_id, chats.upload_folder)


def keep_import(chats: SavedChats, tree: MessageTree[Turn], system: str) -> ChatSession:
    """An imported conversation as a chat of its own, every version of its messages; the one
    shown before stays as saved. Where the store cannot take it now, it is shown unsaved, and
    saved as soon as the store takes it."""
    try:
        return chats.add(tree, system)
    except (SQLAlchemyError, StoreError, OSError) as error:
        added = chats.new_session()
        added.tree = tree
        added.keeper.failed(error)
        return added


def import_archive(chats: SavedChats, path: str, name: str, limits: Limits, progress: Callable[[int, int], None]) -> Notice:
    """Each conversation file of the archive at ``path`` (named ``name``) as a new chat, one at a
    time (``progress``: how many of how many are done), those that cannot be read told and left
    out; the chat shown stays. What was imported, or Refused where the archive cannot be read or
    the user's chats hold no more (what was imported before that stays)."""
    shown, imported = chats.current, 0
    try:
        count, read = chats_in_archive(path, limits, chats.upload_folder)
        chats.store.quota.check_chats(chats.store.count(chats.owner) + count)
        for number, (member, conversation, problem) in enumerate(read):
            progress(number, count)
            if problem:
                chats.tell(Notice("sidebar.import_left_out", {"member": member, "problem": problem}))
            elif len(conversation.tree):
                chats.add(conversation.tree, conversation.system_prompt)
                imported += 1
    except (ChatError, OverQuota) as error:
        raise Refused(Notice("sidebar.import_failed_after", {"name": name, "error": str(error), "count": imported}) if imported
                      else Notice("sidebar.import_failed", {"name": name, "error": str(error)})) from None
    finally:
        chats.current = shown
    return (Notice("sidebar.imported_one", {"name": name}, "info") if imported == 1
            else Notice("sidebar.imported", {"count": imported, "name": name}, "info"))


async def written_elsewhere(chats: SavedChats, session: ChatSession) -> Literal["", "written", "deleted"]:
    """Take into the chat shown what the user's other tabs and devices wrote into it ("written"),
    or keep it apart where they deleted it ("deleted": it stays, as a chat of its own). Left as
    it is ("") while this tab writes a reply or has changes of its own to save, and while the
    store cannot be reached."""
    keeper = session.keeper
    if keeper is None or session.reply.answering or session.left:
        return ""
    looked, gone = as_kept(session), False
    try:
        written = await asyncio.to_thread(keeper.written_elsewhere, session.tree, chats.upload_folder)
    except ChatGone:
        written, gone = None, True
    except (SQLAlchemyError, StoreError, OSError):
        return ""
    # Checked and changed on the event loop, where the reply and sidebar handlers run: none
    # starts in between. A switch of chats begun meanwhile leaves this session.
    if session.reply.answering or session.left or session.keeper is not keeper or as_kept(session) != looked:
        return ""
    if gone:
        chats.keep_apart(session)
        return "deleted"
    if written is None:
        return ""
    stored, session.tree = written
    keeper.took(stored)
    return "written"


def as_kept(session: ChatSession) -> tuple[object, ...]:
    """What changes whenever the tab changes its messages (a message added, one taken out,
    another version shown), while a look for other tabs' writes reads the store."""
    return tuple(session.keeper.rows), len(session.tree), session.tree.shown
